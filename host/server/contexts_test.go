package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc/pb"
)

// stallRaft holds s's state machine and queues proposals until raft's
// leader loop takes no more commands (a stalled disk or a slow state
// machine looks the same to a proposer): a proposal then waits in raft's
// queue before any future exists.
func stallRaft(t *testing.T, s *Server, gate *applyGate) {
	t.Helper()
	gate.shut("")
	buf, err := fsm.Encode(nodeRegister(testNode("filler")))
	if err != nil {
		t.Fatal(err)
	}
	for range 400 {
		// Each waits at most raft's enqueue timeout, or until the test
		// opens the gate.
		go func() { _ = s.raft.Apply(buf, enqueueTimeout) }()
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		// A probe raft takes is held with the rest: wait for it briefly.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := fsm.Await(ctx, s.raft.Apply(buf, 10*time.Millisecond)); !errors.Is(err, raft.ErrEnqueueTimeout) {
			return fmt.Errorf("raft still takes commands (probe: %v)", err)
		}
		return nil
	})
}

// While raft takes no commands, a write, a membership change and a
// leadership check end at their caller's deadline, not after raft's own
// enqueue timeout (30 s).
func TestRaftCallsEndAtTheCallersDeadlineWhileRaftTakesNoCommands(t *testing.T) {
	gate := &applyGate{}
	tc := newTestCluster(t, 1, func(c *testConfig) { c.hooks = &testHooks{beforeApply: gate.hold} })
	t.Cleanup(gate.open) // before the servers shut down
	s := tc.servers[0]
	tc.waitLeader()
	stallRaft(t, s, gate)

	const deadline = 300 * time.Millisecond
	for _, tt := range []struct {
		name string
		call func(context.Context) error
	}{
		{"raftApply", func(ctx context.Context) error {
			typ, cmd := nodeRegister(testNode("late"))
			_, err := s.raftApply(ctx, typ, cmd)
			return err
		}},
		{"removePeer", func(ctx context.Context) error { return s.removePeer(ctx, uuid.Generate()) }},
		{"consistent RaftConfiguration", func(ctx context.Context) error {
			_, err := (&operatorEndpoint{s: s}).RaftConfiguration(ctx, &pb.RaftConfigurationRequest{Query: &pb.QueryOptions{Consistent: true}})
			return err
		}},
		// Join last: its AddVoter of the unreachable raft-x can go through
		// before the stalled servers-table record, and a leader without that
		// quorum steps down a lease later, so a case after it could see "not
		// the leader" instead of its deadline.
		{"Join", func(ctx context.Context) error {
			_, err := (&operatorEndpoint{s: s}).Join(ctx, &pb.JoinRequest{Server: &pb.ServerMember{Id: uuid.Generate(), Name: "x", RaftAddr: "raft-x", RpcAddr: "127.0.0.1:1", Version: s.cfg.Version}})
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		start := time.Now()
		err := tt.call(ctx)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "server "+s.cfg.Name) {
			t.Errorf("%s with a %s deadline on a stalled raft: %v, want context.DeadlineExceeded", tt.name, deadline, err)
		}
		// Raft's own bound is 30 s; 10 s leaves room for a loaded machine.
		if took > 10*time.Second {
			t.Errorf("%s with a %s deadline returned after %s", tt.name, deadline, took)
		}
	}
}

// A membership change whose caller has already given up is not handed to
// raft: the server stays both in raft and in the servers table.
func TestRemovePeerWithAnEndedContextChangesNothing(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.waitLeader()
	other := &pb.ServerMember{Id: uuid.Generate(), Name: "other", RaftAddr: "raft-other", RpcAddr: "127.0.0.1:1"}
	if err := s.raft.AddNonvoter(raft.ServerID(other.GetId()), raft.ServerAddress(other.GetRaftAddr()), 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.raftApply(context.Background(), fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: other}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.removePeer(ctx, other.GetId()); !errors.Is(err, context.Canceled) {
		t.Fatalf("removePeer with a cancelled context: %v, want context.Canceled", err)
	}
	_, err := (&operatorEndpoint{s: s}).RemovePeer(ctx, &pb.RemovePeerRequest{Id: other.GetId()})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RemovePeer with a cancelled context: %v, want context.Canceled", err)
	}
	// Anything proposed before this barrier is applied once it returns.
	if err := s.raft.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	servers, err := s.raftServers()
	if err != nil {
		t.Fatal(err)
	}
	inRaft := false
	for _, rs := range servers {
		inRaft = inRaft || rs.GetId() == other.GetId()
	}
	recorded, err := s.fsm.State().ServerByID(nil, other.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if !inRaft || recorded == nil {
		t.Fatalf("after removals whose caller had given up: in raft %t, recorded %t; want both", inRaft, recorded != nil)
	}
}

// Raft can lose and win leadership again before the leader loop hears of
// the loss; readiness recorded in the earlier term must not let a request
// through without the new term's barrier.
func TestReadinessOfAnEarlierTermLetsNoRequestThrough(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *testConfig) { c.leaderWait = 200 * time.Millisecond })
	s := tc.waitLeader()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !s.leaderReady() {
			return fmt.Errorf("%s has not passed its barrier", s.cfg.Name)
		}
		return nil
	})
	term := s.raft.CurrentTerm()
	if term < 2 {
		t.Fatalf("raft term %d: no earlier term to stand for", term)
	}
	s.ready.set(term - 1)
	_, err := tc.register(s, testNode("early"))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "server "+s.cfg.Name) {
		t.Fatalf("register on a leader ready only in term %d of %d: %v, want Unavailable naming server %s", term-1, term, err, s.cfg.Name)
	}
	s.ready.set(term)
	if _, err := tc.register(s, testNode("ready")); err != nil {
		t.Fatalf("register once the current term's barrier passed: %v", err)
	}
}
