package evals

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// refusingCore refuses every proposal while refuse is set, and counts the
// plans proposed.
type refusingCore struct {
	*fsmCore
	refuse atomic.Bool
	plans  atomic.Int32
}

var errRefused = errors.New("refused by the test")

func (c *refusingCore) ApplyResult(ctx context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error) {
	if t == fsm.PlanApply {
		c.plans.Add(1)
	}
	if c.refuse.Load() {
		return nil, errRefused
	}
	return c.fsmCore.ApplyResult(ctx, t, msg)
}

func (c *refusingCore) Apply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error) {
	r, err := c.ApplyResult(ctx, t, msg)
	if err != nil {
		return 0, err
	}
	return r.Index, nil
}

// A blocked evaluation woken in memory whose failure the worker could not
// record (forget with 0) is woken again by a feed pass within
// feedRetryDelay, with nothing in the state changing: its row is still
// blocked, and before, only an unrelated change woke the feed.
func TestGivenUpWokenEvalIsWokenAgainWithoutAChange(t *testing.T) {
	c, _ := blockedFixture(t, 0)
	// A node after the evaluation's snapshot: capacity that may fit it.
	c.must(t, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n2", Name: "n2", Status: pb.NodeStatus_NODE_STATUS_READY,
		Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1000}}})
	core := &refusingCore{fsmCore: c}
	core.refuse.Store(true)
	clk := testutil.NewManualClock()
	r := NewRunner(core, Config{Workers: 1, Clock: clk, Logger: testutil.Logger(t)}, Hooks{})
	r.broker.cfg.deliveryLimit = 1
	r.broker.SetEnabled(true)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		r.broker.SetEnabled(false)
		wg.Wait()
	}()
	r.Run(ctx, func(f func()) { wg.Go(f) })

	// The first pass wakes it; its plan and its failure are refused.
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := core.plans.Load(); n != 1 {
			return fmt.Errorf("%d plans proposed, want 1", n)
		}
		if clk.Pending() == 0 {
			return errors.New("no retry of the feed armed")
		}
		if _, outstanding, _, _ := r.broker.Stats(); outstanding != 0 {
			return fmt.Errorf("%d outstanding", outstanding)
		}
		return nil
	})
	clk.Advance(feedRetryDelay)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := core.plans.Load(); n < 2 {
			return fmt.Errorf("%d plans proposed, want the evaluation planned again", n)
		}
		return nil
	})
}

// A new leader's first pass that fails part-way is retried still waking
// every blocked evaluation: one whose snapshot is past every change (only
// "wake everything" wakes it) is woken by the retry (before: the retry
// ran without it and left that evaluation blocked for the leadership).
func TestFirstPassFailingPartWayStillWakesEverything(t *testing.T) {
	c, _ := blockedFixture(t, 0)
	c.must(t, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "api", Name: "api", Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50}})
	c.must(t, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{{Id: "blocked-api", JobId: "api", Priority: 50,
		Type: pb.JobType_JOB_TYPE_SERVICE, Status: pb.EvalStatus_EVAL_STATUS_BLOCKED, SnapshotIndex: c.index}}})
	clk := testutil.NewManualClock()
	r := NewRunner(c, Config{Clock: clk, Logger: testutil.Logger(t)}, Hooks{})
	var failed atomic.Bool
	r.unblockFault = func(e *pb.Evaluation) error {
		if e.GetId() == "blocked-api" && failed.CompareAndSwap(false, true) {
			return errors.New("a read failed")
		}
		return nil
	}
	r.broker.SetEnabled(true)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { r.feedBroker(ctx) }) // no workers: what is woken stays ready
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !failed.Load() || clk.Pending() == 0 {
			return errors.New("the first pass has not failed and armed its retry yet")
		}
		return nil
	})
	clk.Advance(feedRetryDelay)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if woken := wokenEvals(r); len(woken) != 2 {
			return fmt.Errorf("woken %v, want both blocked evaluations", woken)
		}
		return nil
	})
}
