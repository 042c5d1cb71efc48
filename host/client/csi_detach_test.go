package client

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/volumehooks"
)

// NodeDetachVolume hands the volume to the volume hooks' detach with the
// call's deadline less the answer's slack, answers what it did, and
// passes its refusals on with their codes; a call for another node, or
// on a client without volume hooks, is refused.
func TestNodeDetachVolume(t *testing.T) {
	const node = "5e0c8f5e-0000-4000-8000-000000000001"
	var gotVolume string
	var left time.Duration
	r := &clientCSI{nodeID: node, detach: func(ctx context.Context, volumeID string) (volumehooks.DetachResult, error) {
		gotVolume = volumeID
		if dl, ok := ctx.Deadline(); ok {
			left = time.Until(dl)
		}
		if volumeID == "busy" {
			return volumehooks.DetachResult{}, fmt.Errorf("detaching volume %q from node %s: %w: alloc a1", volumeID, node, volumehooks.ErrDetachInUse)
		}
		return volumehooks.DetachResult{PluginID: "hostpath", Allocs: []string{"a1"}, Claims: []string{"c1"}, Unstaged: true}, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := r.NodeDetachVolume(ctx, &pb.CSINodeDetachRequest{NodeId: node, VolumeId: "data"})
	if err != nil {
		t.Fatal(err)
	}
	if gotVolume != "data" || resp.GetPluginId() != "hostpath" || len(resp.GetAllocIds()) != 1 || len(resp.GetClaimIds()) != 1 || !resp.GetUnstaged() {
		t.Fatalf("detach of %q answered %v", gotVolume, resp)
	}
	if left <= 0 || left > time.Minute-detachAnswerSlack {
		t.Fatalf("the hooks' detach had %s of the call's minute, want it less the %s slack", left, detachAnswerSlack)
	}

	_, err = r.NodeDetachVolume(ctx, &pb.CSINodeDetachRequest{NodeId: node, VolumeId: "busy"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "alloc a1") {
		t.Fatalf("refused detach: %v, want FailedPrecondition naming the alloc", err)
	}
	_, err = r.NodeDetachVolume(ctx, &pb.CSINodeDetachRequest{NodeId: "other", VolumeId: "data"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "reached node "+node) {
		t.Fatalf("detach for another node: %v", err)
	}
	none := &clientCSI{nodeID: node}
	if _, err := none.NodeDetachVolume(ctx, &pb.CSINodeDetachRequest{NodeId: node, VolumeId: "data"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("detach on a client without volume hooks: %v, want FailedPrecondition", err)
	}
}
