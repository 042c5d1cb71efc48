package server

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

// planGate holds every plan in beforePlan until open is closed, counting
// the plans held at once.
type planGate struct {
	held atomic.Int32
	open chan struct{}
}

func newPlanGate() *planGate { return &planGate{open: make(chan struct{})} }

func (g *planGate) hook(ctx context.Context, _ *pb.Evaluation) {
	g.held.Add(1)
	defer g.held.Add(-1)
	select {
	case <-g.open:
	case <-ctx.Done():
	}
}

// waitHeld waits until n plans are held at once.
func (g *planGate) waitHeld(t *testing.T, n int) {
	t.Helper()
	testutil.WaitFor(t, 15*time.Second, func() error {
		if h := int(g.held.Load()); h < n {
			return fmt.Errorf("%d plans made and waiting for raft at once, want %d", h, n)
		}
		return nil
	})
}

// By default the leader plans many more jobs at once than it has cores: a
// worker spends its plan's raft commit waiting, so one worker per core
// (two on this machine) capped 1,000 volume jobs at ~20 placements a
// second behind a ~100 ms commit. Every plan held at once still applies,
// each job placed once.
func TestLeaderPlansMoreJobsAtOnceThanItHasCores(t *testing.T) {
	want := 2 * max(runtime.NumCPU(), 2)
	gate := newPlanGate()
	tc := newTestCluster(t, 1, func(c *testConfig) { c.hooks = &testHooks{beforePlan: gate.hook} })
	s := tc.servers[0]
	registerNodes(t, tc, s, workNode("n1"), workNode("n2"))
	jobs := pb.NewJobsClient(tc.conn(s))
	for i := range want {
		if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: serviceJob(fmt.Sprintf("j%02d", i), 1)}); err != nil {
			t.Fatal(err)
		}
	}
	gate.waitHeld(t, want)
	close(gate.open)
	testutil.WaitFor(t, 15*time.Second, func() error {
		for i := range want {
			id := fmt.Sprintf("j%02d", i)
			if n := len(liveAllocs(t, tc, s, id)); n != 1 {
				return fmt.Errorf("job %s has %d live allocs, want 1", id, n)
			}
		}
		return nil
	})
	for i := range want {
		evs, err := s.State().EvalsByJob(nil, fmt.Sprintf("j%02d", i))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.GetStatus() != pb.EvalStatus_EVAL_STATUS_COMPLETE {
				t.Errorf("evaluation %s of job %s is %s (%s), want complete", e.GetId(), e.GetJobId(), e.GetStatus(), e.GetStatusDescription())
			}
		}
	}
}

// Many jobs planned at once from one snapshot, every one of them seeing
// the single-writer volume free: the state machine gives its claim to one
// plan; every other plan is refused, planned again from the newer state
// and blocked on the volume. No second alloc or claim is ever written.
func TestJobsPlannedAtOnceForOneSingleWriterVolumeNeverBothGetIt(t *testing.T) {
	gate := newPlanGate()
	tc := newTestCluster(t, 1, withVersion(version.Version), func(c *testConfig) {
		c.noControllerCalls = true
		c.hooks = &testHooks{beforePlan: gate.hook}
	})
	s := tc.servers[0]
	csi := pb.NewCSIPluginsClient(tc.conn(s))
	for _, name := range []string{"n1", "n2"} {
		n := workNode(name)
		if _, err := tc.register(s, n); err != nil {
			t.Fatal(err)
		}
		updateCSI(t, csi, &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
			Nodes: map[string]*pb.CSIPluginInfo{"hostpath": {Healthy: true, Provider: "hostpath.csi.berth.dev"}},
		})
	}
	vol := &pb.Volume{Id: "vol1", Name: "vol1", PluginId: "hostpath", ExternalId: "ext-1",
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: vol, RegisteredAt: 1}); err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	jobs := pb.NewJobsClient(tc.conn(s))
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for _, name := range names {
		wg.Go(func() {
			if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob(name, 1)}); err != nil {
				errs <- fmt.Errorf("register %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every job's first plan was made while no plan had applied: each
	// holds vol1's one claim.
	gate.waitHeld(t, len(names))
	close(gate.open)
	var winner string
	testutil.WaitFor(t, 15*time.Second, func() error {
		winner = ""
		for _, name := range names {
			switch live := liveAllocs(t, tc, s, name); {
			case len(live) > 1 || (len(live) == 1 && winner != ""):
				t.Fatalf("two allocs hold single-node-single-writer vol1: job %s has %d, winner so far %q", name, len(live), winner)
			case len(live) == 1:
				winner = name
			}
		}
		if winner == "" {
			return errors.New("no job placed yet")
		}
		return nil
	})
	onlyWinnerHoldsVol1(t, s, names, winner)
}
