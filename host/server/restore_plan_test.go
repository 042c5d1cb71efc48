package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// A plan the old duties proposed while raft was restoring a snapshot waits
// in raft's queue and is applied to the restored store. The new duties
// must start from a store that holds it: planning the restored pending
// evaluation again from a store without it placed the job twice (a job of
// count 2 with 4 live allocs).
func TestRestoreKeepsAPlanProposedDuringItFromPlacingTwice(t *testing.T) {
	var (
		plans         atomic.Int32
		armed         atomic.Bool // the old plan's proposal and apply are watched
		held          = make(chan string, 1)
		releasePlan   = make(chan struct{})
		proposed      = make(chan struct{})
		restoreIn     = make(chan struct{})
		releaseFSM    = make(chan struct{})
		secondPlanned = make(chan struct{})
		restartsBar   = make(chan struct{})
		barriers      atomic.Int32
		proposedOnce  sync.Once
	)
	tc := newTestCluster(t, 1, func(c *testConfig) {
		c.hooks = &testHooks{
			beforeBarrier: func(context.Context) {
				// The first is the new leader's; the second follows the restore.
				if barriers.Add(1) == 2 {
					close(restartsBar)
				}
			},
			beforePlan: func(_ context.Context, e *pb.Evaluation) {
				switch plans.Add(1) {
				case 1:
					held <- e.GetId()
					<-releasePlan // the old duties' plan, held past their end
				case 2:
					close(secondPlanned)
				}
			},
			proposing: func(mt fsm.MessageType) {
				if mt == fsm.PlanApply && armed.Load() {
					proposedOnce.Do(func() { close(proposed) })
				}
			},
			beforeRestore: func() {
				if armed.Load() {
					close(restoreIn)
					<-releaseFSM
				}
			},
			beforeApply: func(logs []*raft.Log) {
				for _, l := range logs {
					if l.Type == raft.LogCommand && fsm.PeekType(l.Data) == fsm.PlanApply && armed.CompareAndSwap(true, false) {
						// Applied after the restore: held until the
						// new duties either planned the evaluation
						// again (the bug) or wait for it (the fix).
						select {
						case <-secondPlanned:
						case <-restartsBar:
						}
					}
				}
			},
		}
	})
	s := tc.servers[0]
	registerNodes(t, tc, s, workNode("n1"), workNode("n2"))
	reg := registerJob(t, tc, s, serviceJob("web", 2))
	if id := <-held; id != reg.GetEvalId() {
		t.Fatalf("the held plan is of evaluation %s, want %s", id, reg.GetEvalId())
	}
	snap := saveSnapshot(t, tc, s)
	armed.Store(true)
	restored := make(chan error, 1)
	go func() { restored <- restoreSnapshot(tc, s, snap) }()
	// raft's leader loop waits for the FSM to restore: the plan proposed
	// now waits in raft's queue until the restore is done.
	<-restoreIn
	close(releasePlan)
	<-proposed
	close(releaseFSM)
	if err := <-restored; err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 15*time.Second, func() error {
		st, _ := s.duties.state()
		if st != s.fsm.State() {
			return fmt.Errorf("the leader's duties have not started on the restored store")
		}
		e, err := st.EvalByID(nil, reg.GetEvalId())
		if err != nil || e.GetStatus() != pb.EvalStatus_EVAL_STATUS_COMPLETE {
			return fmt.Errorf("evaluation %s is %s (%v)", reg.GetEvalId(), e.GetStatus(), err)
		}
		if ready, outstanding, waiting, delayed := s.evals.Broker().Stats(); ready+outstanding+waiting+delayed != 0 {
			return fmt.Errorf("broker holds %d ready, %d outstanding, %d waiting, %d delayed", ready, outstanding, waiting, delayed)
		}
		return nil
	})
	if as := liveAllocs(t, tc, s, "web"); len(as) != 2 {
		t.Fatalf("web has %d live allocs after the restore, want its count 2 (%d plans made)", len(as), plans.Load())
	}
}

// Plans carry refuse_unseen_history only once every server records a
// version that knows the rule; a cluster with an older server applies
// them under the older rule.
func TestPlansRefuseUnseenHistoryOnlyWhenEveryServerKnowsTheRule(t *testing.T) {
	for _, tt := range []struct {
		version string
		want    bool
	}{
		{evals.PlanHistorySinceVersion, true},
		{"0.1.0-dev", false},
		{"0.1.0-dev.1", false}, // the plugin-facts rule, not this one
	} {
		t.Run(tt.version, func(t *testing.T) {
			flags := make(chan bool, 1)
			tc := newTestCluster(t, 1, withVersion(tt.version), func(c *testConfig) {
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
						select {
						case flags <- msg.(*pb.PlanApplyCommand).GetRefuseUnseenHistory():
						default:
						}
					}
				}}
			})
			s := tc.servers[0]
			// The server's version is recorded before the plan is made.
			testutil.WaitFor(t, 10*time.Second, func() error {
				m, err := s.State().ServerByID(nil, s.ID())
				if err != nil || m.GetVersion() != tt.version {
					return fmt.Errorf("server %s has recorded version %q (%v)", s.ID(), m.GetVersion(), err)
				}
				return nil
			})
			registerNodes(t, tc, s, workNode("n1"))
			registerJob(t, tc, s, serviceJob("web", 1))
			if got := <-flags; got != tt.want {
				t.Fatalf("a plan proposed with every server at %s has refuse_unseen_history %v, want %v", tt.version, got, tt.want)
			}
		})
	}
}

// A restore answers once the leader's duties run on its state, or once a
// second restore replaced that state before they did: the duties never
// start on it, and the first restore waited for ever.
func TestRestoreReplacedByAnotherBeforeTheDutiesStartAnswers(t *testing.T) {
	var barriers atomic.Int32
	held := make(chan struct{})
	release := make(chan struct{})
	awaiting := make(chan *fsm.StateStore, 2)
	tc := newTestCluster(t, 1, func(c *testConfig) {
		c.hooks = &testHooks{awaitingDuties: func(st *fsm.StateStore) { awaiting <- st }, beforeBarrier: func(ctx context.Context) {
			if barriers.Add(1) == 2 { // the first restore's restart
				close(held)
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
		}}
	})
	s := tc.servers[0]
	registerNodes(t, tc, s, workNode("n1"))
	snap := saveSnapshot(t, tc, s)
	first := make(chan error, 1)
	go func() { first <- restoreSnapshot(tc, s, snap) }()
	<-held
	restored := <-awaiting // the first restore waits for duties on its state
	if restored != s.fsm.State() {
		t.Fatal("the first restore waits on another state than the one it restored")
	}
	second := make(chan error, 1)
	go func() { second <- restoreSnapshot(tc, s, snap) }()
	select {
	case err := <-first:
		if err != nil {
			t.Fatalf("first restore: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the first restore still waits for the leader's duties on a state a second restore replaced")
	}
	if s.fsm.State() == restored {
		t.Fatal("the first restore answered before the second replaced its state")
	}
	close(release)
	if err := <-second; err != nil {
		t.Fatalf("second restore: %v", err)
	}
	if st, _ := s.duties.state(); st != s.fsm.State() {
		t.Fatal("the second restore answered before the duties ran on its state")
	}
}
