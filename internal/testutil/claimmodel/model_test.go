package claimmodel

import (
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/pb"
)

// TestOutsideHistories pins what the kinds for histories taken outside the
// cluster allow, and that they do not hide a second writer.
func TestOutsideHistories(t *testing.T) {
	snw := pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER
	claim := func(id string) Op {
		return Op{Kind: KindClaim, Volume: "v", ID: id, Node: "n1", Write: true, Access: snw}
	}
	gone := func(id string) Op { return Op{Kind: KindGone, Volume: "v", ID: id} }
	ok, exhausted := Result{Code: codes.OK}, Result{Code: codes.ResourceExhausted}
	never := int64(math.MaxInt64)
	for _, tc := range []struct {
		name    string
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{
		{"two writers", []porcupine.Operation{
			{Input: claim("a"), Call: 0, Output: ok, Return: 10},
			{Input: claim("b"), Call: 20, Output: ok, Return: 30},
		}, porcupine.Illegal},
		{"freed between them", []porcupine.Operation{
			{Input: claim("a"), Call: 0, Output: ok, Return: 10},
			{Input: gone("a"), Call: 5, Output: ok, Return: 15},
			{Input: claim("b"), Call: 20, Output: ok, Return: 30},
		}, porcupine.Ok},
		{"freed only after the second writer", []porcupine.Operation{
			{Input: claim("a"), Call: 0, Output: ok, Return: 10},
			{Input: claim("b"), Call: 20, Output: ok, Return: 30},
			{Input: gone("a"), Call: 40, Output: ok, Return: 50},
		}, porcupine.Illegal},
		{"a refusal explained by an uncertain claim", []porcupine.Operation{
			{Input: claim("a"), Call: 0, Output: Result{Uncertain: true}, Return: never},
			{Input: claim("b"), Call: 20, Output: exhausted, Return: 30},
		}, porcupine.Ok},
		{"a refusal nothing explains", []porcupine.Operation{
			{Input: claim("b"), Call: 20, Output: exhausted, Return: 30},
		}, porcupine.Illegal},
		{"refused outside the model", []porcupine.Operation{
			{Input: claim("b"), Call: 20, Output: Result{Code: codes.FailedPrecondition, Outside: true}, Return: 30},
			{Input: claim("c"), Call: 40, Output: ok, Return: 50},
		}, porcupine.Ok},
		{"a claim that cannot have fit", []porcupine.Operation{
			{Input: claim("a"), Call: 0, Output: Result{Uncertain: true}, Return: never},
			{Input: claim("b"), Call: 20, Output: ok, Return: 30},
			{Input: claim("c"), Call: 40, Output: ok, Return: 50},
		}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperationsTimeout(Model, tc.history, time.Second); got != tc.want {
				t.Fatalf("history is %s, want %s", got, tc.want)
			}
		})
	}
}
