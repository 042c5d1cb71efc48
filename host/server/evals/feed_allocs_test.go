package evals

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// fsmCore applies every proposal to a state machine at once.
type fsmCore struct {
	f     *fsm.FSM
	index uint64
}

func (c *fsmCore) State() *fsm.StateStore { return c.f.State() }

func (c *fsmCore) ApplyResult(_ context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error) {
	buf, err := fsm.Encode(t, msg)
	if err != nil {
		return nil, err
	}
	c.index++
	res := c.f.ApplyLog(&raft.Log{Index: c.index, Term: 1, Type: raft.LogCommand, Data: buf})
	return res, res.Err
}

func (c *fsmCore) Apply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error) {
	r, err := c.ApplyResult(ctx, t, msg)
	if err != nil {
		return 0, err
	}
	return r.Index, nil
}

func (c *fsmCore) RequireServersAt(versions.Constraint, string, string) error { return nil }

func (c *fsmCore) must(t testing.TB, mt fsm.MessageType, msg proto.Message) uint64 {
	t.Helper()
	idx, err := c.Apply(context.Background(), mt, msg)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// blockedFixture is a node, a job, n allocs placed and running on the
// node, and a blocked evaluation planned after all of it.
func blockedFixture(t testing.TB, n int) (*fsmCore, *Runner) {
	t.Helper()
	c := &fsmCore{f: fsm.New(testutil.Logger(t))}
	c.must(t, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n1", Name: "n1", Status: pb.NodeStatus_NODE_STATUS_READY,
		Resources: &pb.NodeResources{CpuMhz: 1 << 30, MemoryMb: 1 << 30}}})
	c.must(t, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Name: "web", Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50}})
	for i := 0; i < n; i += 500 {
		plan := &pb.Plan{EvalId: "e0", JobId: "web"}
		for j := i; j < min(n, i+500); j++ {
			plan.Allocs = append(plan.Allocs, &pb.Allocation{Id: fmt.Sprintf("a%05d", j), NodeId: "n1", JobId: "web",
				Resources: &pb.AllocResources{CpuMhz: 1, MemoryMb: 1}})
		}
		c.must(t, fsm.PlanApply, &pb.PlanApplyCommand{Plan: plan})
	}
	var updates []*pb.AllocClientUpdate
	for j := range n {
		updates = append(updates, &pb.AllocClientUpdate{AllocId: fmt.Sprintf("a%05d", j), ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING})
	}
	c.must(t, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1", Updates: updates})
	c.must(t, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{{Id: "blocked", JobId: "web", Priority: 50,
		Type: pb.JobType_JOB_TYPE_SERVICE, Status: pb.EvalStatus_EVAL_STATUS_BLOCKED, SnapshotIndex: c.index}}})
	r := NewRunner(c, Config{}, Hooks{})
	r.broker.SetEnabled(true)
	return c, r
}

// wokenEvals returns the IDs and statuses of the evaluations the broker
// has ready to hand out.
func wokenEvals(r *Runner) map[string]pb.EvalStatus {
	r.broker.mu.Lock()
	defer r.broker.mu.Unlock()
	out := map[string]pb.EvalStatus{}
	for _, e := range r.broker.ready {
		out[e.GetId()] = e.GetStatus()
	}
	return out
}

// unblockOnce runs one pass of the feed's unblock over the state's blocked
// evaluations, and returns the watch set it filled.
func unblockOnce(t testing.TB, c *fsmCore, r *Runner) memdb.WatchSet {
	t.Helper()
	ws := memdb.NewWatchSet()
	snap := c.State().Snapshot()
	blocked, err := snap.EvalsByStatus(nil, pb.EvalStatus_EVAL_STATUS_BLOCKED)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.unblock(ws, snap, blocked, false); err != nil {
		t.Fatal(err)
	}
	return ws
}

func evalStatus(t testing.TB, c *fsmCore) pb.EvalStatus {
	t.Helper()
	e, err := c.State().EvalByID(nil, "blocked")
	if err != nil {
		t.Fatal(err)
	}
	return e.GetStatus()
}

func watchFired(ws memdb.WatchSet) bool {
	for ch := range ws {
		select {
		case <-ch:
			return true
		default:
		}
	}
	return false
}

// TestUnblockOnAllocsFreed: a blocked evaluation stays blocked, and the
// feed asleep, through a client's update that leaves an alloc running;
// the client failing an alloc, or the servers stopping one, fires the
// feed's watch and wakes the evaluation: the broker hands it out pending,
// with no raft write (the state keeps it blocked until its plan records
// the outcome).
func TestUnblockOnAllocsFreed(t *testing.T) {
	for _, tc := range []struct {
		name string
		free func(c *fsmCore)
	}{
		{"client failed", func(c *fsmCore) {
			c.must(t, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1",
				Updates: []*pb.AllocClientUpdate{{AllocId: "a00001", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED}}})
		}},
		{"client complete", func(c *fsmCore) {
			c.must(t, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1",
				Updates: []*pb.AllocClientUpdate{{AllocId: "a00001", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}}})
		}},
		{"server stop", func(c *fsmCore) {
			c.must(t, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e1", JobId: "web", Stops: []*pb.AllocStop{{AllocId: "a00001"}}}})
		}},
		{"server update in place", func(c *fsmCore) {
			c.must(t, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e1", JobId: "web", Allocs: []*pb.Allocation{
				{Id: "a00001", NodeId: "n1", JobId: "web", Resources: &pb.AllocResources{CpuMhz: 0, MemoryMb: 0}}}}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, r := blockedFixture(t, 3)
			ws := unblockOnce(t, c, r)
			if s := evalStatus(t, c); s != pb.EvalStatus_EVAL_STATUS_BLOCKED {
				t.Fatalf("nothing freed: eval %v", s)
			}
			c.must(t, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1",
				Updates: []*pb.AllocClientUpdate{{AllocId: "a00002", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING}}})
			if watchFired(ws) {
				t.Fatal("a client's running update woke the feed")
			}
			unblockOnce(t, c, r)
			if s := evalStatus(t, c); s != pb.EvalStatus_EVAL_STATUS_BLOCKED {
				t.Fatalf("after a running update: eval %v, want blocked", s)
			}
			if woken := wokenEvals(r); len(woken) != 0 {
				t.Fatalf("nothing freed: the broker holds %v", woken)
			}
			tc.free(c)
			if !watchFired(ws) {
				t.Fatal("freeing an alloc did not wake the feed")
			}
			before := c.index
			unblockOnce(t, c, r)
			if woken := wokenEvals(r); len(woken) != 1 || woken["blocked"] == pb.EvalStatus_EVAL_STATUS_UNSPECIFIED {
				t.Fatalf("after freeing an alloc the broker holds %v, want the blocked evaluation ready", woken)
			}
			if c.index != before {
				t.Fatalf("waking the evaluation wrote %d raft entries, want none", c.index-before)
			}
			if s := evalStatus(t, c); s != pb.EvalStatus_EVAL_STATUS_BLOCKED {
				t.Fatalf("after waking: the stored eval is %v, want blocked until its plan records it", s)
			}
		})
	}
}

// BenchmarkUnblock is one pass of the feed over a blocked evaluation that
// nothing woke, with 10,000 allocs in the state; scan is the read of every
// alloc it did before AllocsFreedIndex, for comparison in the same run.
func BenchmarkUnblock(b *testing.B) {
	c, r := blockedFixture(b, 10000)
	b.Run("allocs=10000", func(b *testing.B) {
		for b.Loop() {
			unblockOnce(b, c, r)
		}
	})
	b.Run("scan/allocs=10000", func(b *testing.B) {
		for b.Loop() {
			allocs, _, err := c.State().Snapshot().AllocsPage(memdb.NewWatchSet(), "", 0, nil)
			if err != nil {
				b.Fatal(err)
			}
			var freed uint64
			for _, a := range allocs {
				if rules.AllocTerminal(a) {
					freed = max(freed, a.GetModifyIndex())
				} else {
					freed = max(freed, a.GetAllocModifyIndex())
				}
			}
			_ = freed
		}
	})
	if s := evalStatus(b, c); s != pb.EvalStatus_EVAL_STATUS_BLOCKED {
		b.Fatalf("eval %v: the benchmark woke it", s)
	}
}
