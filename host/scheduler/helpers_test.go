package scheduler_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

const now = int64(1_800_000_000_000_000_000)

func run(t *testing.T, st *schedtest.State, eval *pb.Evaluation) *scheduler.Result {
	t.Helper()
	return runAt(t, st, eval, now)
}

func runAt(t *testing.T, st *schedtest.State, eval *pb.Evaluation, at int64) *scheduler.Result {
	t.Helper()
	res, err := scheduler.Schedule(st, eval, scheduler.Options{Now: at, NewID: schedtest.Seq(eval.GetId())})
	if err != nil {
		t.Fatalf("Schedule(eval %s): %v", eval.GetId(), err)
	}
	return res
}

// placed returns "name@node" for every new placement, sorted.
func placed(res *scheduler.Result) []string {
	var out []string
	for _, a := range res.Plan.GetAllocs() {
		out = append(out, a.GetName()+"@"+a.GetNodeId())
	}
	sort.Strings(out)
	return out
}

// nodesOf counts placements per node.
func nodesOf(res *scheduler.Result) map[string]int {
	out := map[string]int{}
	for _, a := range res.Plan.GetAllocs() {
		out[a.GetNodeId()]++
	}
	return out
}

// stops returns "alloc:desired:client:desc" per stop, sorted.
func stops(res *scheduler.Result) []string {
	var out []string
	for _, s := range res.Plan.GetStops() {
		st := strings.TrimPrefix(s.GetDesiredStatus().String(), "ALLOC_DESIRED_STATUS_")
		cs := strings.TrimPrefix(s.GetClientStatus().String(), "ALLOC_CLIENT_STATUS_")
		out = append(out, fmt.Sprintf("%s:%s:%s", s.GetAllocId(), st, cs))
	}
	sort.Strings(out)
	return out
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s:\n got %v\nwant %v", what, got, want)
	}
}

func nodes(st *schedtest.State, ids ...string) {
	for _, id := range ids {
		st.AddNode(schedtest.Node(id))
	}
}
