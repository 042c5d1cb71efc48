package server

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// A plan whose placements are over the part budget (a system job on many
// nodes: not bounded by job_max_allocs) is applied as several plan
// commands of whole nodes, each under the budget, the evaluation recorded
// with the last: the job runs on every node. One plan command over the
// message limit was refused on every attempt, for ever.
func TestLargePlanIsAppliedInPartsOfWholeNodes(t *testing.T) {
	const budget = 4 << 10
	var (
		mu    sync.Mutex
		parts []*pb.PlanApplyCommand
	)
	tc := newTestCluster(t, 1, func(c *testConfig) {
		c.planPartBytes = budget
		c.hooks = &testHooks{beforeApply: func(logs []*raft.Log) {
			for _, l := range logs {
				if l.Type != raft.LogCommand || fsm.PeekType(l.Data) != fsm.PlanApply {
					continue
				}
				_, msg, err := fsm.Decode(l.Data)
				if err != nil {
					t.Error(err)
					continue
				}
				mu.Lock()
				parts = append(parts, msg.(*pb.PlanApplyCommand))
				mu.Unlock()
			}
		}}
	})
	s := tc.servers[0]
	const nodes = 40
	var ns []*pb.Node
	for i := range nodes {
		ns = append(ns, workNode(fmt.Sprintf("n%02d", i)))
	}
	registerNodes(t, tc, s, ns...)
	reg := registerJob(t, tc, s, systemJob("sys"))
	waitAllocs(t, tc, s, "sys", nodes, nil)
	testutil.WaitFor(t, 10*time.Second, func() error {
		e, _ := s.State().EvalByID(nil, reg.GetEvalId())
		if e.GetStatus() != pb.EvalStatus_EVAL_STATUS_COMPLETE {
			return fmt.Errorf("evaluation %s is %s", reg.GetEvalId(), e.GetStatus())
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(parts) < 2 {
		t.Fatalf("%d plan commands for %d nodes' placements, want several under %d bytes", len(parts), nodes, budget)
	}
	seen := map[string]bool{}
	for i, p := range parts {
		var size int
		for _, a := range p.GetPlan().GetAllocs() {
			size += proto.Size(a)
			if seen[a.GetNodeId()] {
				t.Fatalf("node %s has placements in two parts", a.GetNodeId())
			}
		}
		for _, a := range p.GetPlan().GetAllocs() {
			seen[a.GetNodeId()] = true
		}
		if size > budget && len(p.GetPlan().GetAllocs()) > 1 {
			t.Fatalf("part %d holds %d bytes of placements, over the budget of %d", i+1, size, budget)
		}
		if last := i == len(parts)-1; last != (len(p.GetEvals()) > 0) {
			t.Fatalf("part %d of %d carries %d evaluations; want them with the last part only", i+1, len(parts), len(p.GetEvals()))
		}
	}
}
