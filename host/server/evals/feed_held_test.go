package evals

import (
	"fmt"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// heldFixture is n jobs, each with a blocked evaluation that claims a
// volume, all woken and held by the broker, not yet handed out.
func heldFixture(t testing.TB, n int) (*fsmCore, *Runner) {
	t.Helper()
	c := &fsmCore{f: fsm.New(testutil.Logger(t))}
	var evs []*pb.Evaluation
	for i := range n {
		id := fmt.Sprintf("j%05d", i)
		c.must(t, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: id, Name: id, Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
			Groups: []*pb.TaskGroup{{Name: "g", Count: 1,
				Volumes: map[string]*pb.VolumeRequest{"data": {Type: "csi", Source: "vol-" + id}},
				Tasks:   []*pb.Task{{Name: "t", Driver: "mock", Resources: &pb.TaskResources{CpuMhz: 1 << 20}}}}}}})
		evs = append(evs, &pb.Evaluation{Id: "b" + id, JobId: id, Priority: 50, Type: pb.JobType_JOB_TYPE_SERVICE,
			Status: pb.EvalStatus_EVAL_STATUS_BLOCKED, TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS, SnapshotIndex: 1})
	}
	c.must(t, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: evs})
	c.must(t, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n1", Name: "n1", Status: pb.NodeStatus_NODE_STATUS_READY}})
	r := NewRunner(c, Config{}, Hooks{})
	r.broker.SetEnabled(true)
	unblockOnce(t, c, r) // all woken (a node joined after their snapshot), held
	if ready, _, _, _ := r.broker.Stats(); ready != n {
		t.Fatalf("%d ready after the first pass, want %d", ready, n)
	}
	return c, r
}

// A feed pass skips the blocked evaluations the broker already holds and
// no worker has: it neither reads their jobs and volumes nor copies them,
// so its cost does not grow with a woken backlog (before: about six
// allocations per held evaluation per pass, so draining a new leader's
// backlog of n cost n passes of O(n)).
func TestUnblockSkipsHeldEvals(t *testing.T) {
	const n = 500
	c, r := heldFixture(t, n)
	allocs := testing.AllocsPerRun(5, func() { unblockOnce(t, c, r) })
	// The pass's fixed reads and the blocked list's own slice; far below
	// one allocation per held evaluation.
	if allocs > n/5 {
		t.Fatalf("a pass over %d held evaluations made %.0f allocations, want at most %d", n, allocs, n/5)
	}
	// An outstanding one is still judged: its wake is kept for its ack.
	e, tok := mustDequeue(t, r.broker)
	c.must(t, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n2", Name: "n2", Status: pb.NodeStatus_NODE_STATUS_READY}})
	unblockOnce(t, c, r)
	if _, ok := r.broker.wakeAgain[e.GetId()]; !ok {
		t.Fatalf("the outstanding evaluation's wake was not kept")
	}
	if err := r.broker.ackPlanned(e.GetId(), tok, c.index, 1); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkUnblockHeld is one feed pass over n blocked evaluations the
// broker holds, woken and not yet planned: what every pass costs until
// the workers drain them.
func BenchmarkUnblockHeld(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			c, r := heldFixture(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				unblockOnce(b, c, r)
			}
		})
	}
}
