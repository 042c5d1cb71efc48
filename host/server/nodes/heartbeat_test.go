package nodes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// fakeNodes is a node table for heartbeat timers; it records down-markings
// with the (bubble) time they happened at.
type fakeNodes struct {
	mu     sync.Mutex
	nodes  map[string]*pb.Node
	downs  []time.Time
	readys []time.Time
	// holdDown, when set, keeps each down-marking in flight until it is
	// closed or the marking's context ends (which then marks nothing).
	holdDown chan struct{}
	// holdRead, when set, holds NodeByID until it is closed.
	holdRead chan struct{}
	// holdQueue, when not empty, gives each down-marking in turn its own
	// hold (taking precedence over holdDown).
	holdQueue []chan struct{}
}

var _ HeartbeatNodes = (*fakeNodes)(nil)

func newFakeNodes(ids ...string) *fakeNodes {
	f := &fakeNodes{nodes: map[string]*pb.Node{}}
	for _, id := range ids {
		f.nodes[id] = &pb.Node{Id: id, Name: id, Status: pb.NodeStatus_NODE_STATUS_READY, ModifyIndex: 1}
	}
	return f
}

func (f *fakeNodes) Nodes() ([]*pb.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*pb.Node
	for _, n := range f.nodes {
		out = append(out, n)
	}
	return out, nil
}

func (f *fakeNodes) NodeByID(id string) (*pb.Node, error) {
	f.mu.Lock()
	hold := f.holdRead
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[id], nil
}

// MarkDown marks id down unless it changed since the marking was decided
// (its modify index moved), as the FSM's conditional update does.
func (f *fakeNodes) MarkDown(ctx context.Context, id, _ string, modifyIndex uint64) error {
	f.mu.Lock()
	hold := f.holdDown
	if len(f.holdQueue) > 0 {
		hold, f.holdQueue = f.holdQueue[0], f.holdQueue[1:]
	}
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := f.nodes[id].GetModifyIndex(); modifyIndex != 0 && got != modifyIndex {
		return fmt.Errorf("node %s at %d, marking decided at %d: %w", id, got, modifyIndex, fsm.ErrNodeChanged)
	}
	f.setLocked(id, pb.NodeStatus_NODE_STATUS_DOWN)
	f.downs = append(f.downs, time.Now())
	return nil
}

func (f *fakeNodes) MarkReady(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(id, pb.NodeStatus_NODE_STATUS_READY)
	f.readys = append(f.readys, time.Now())
	return nil
}

// register stands for a registration committed in raft: the node is ready
// at a new modify index.
func (f *fakeNodes) register(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(id, pb.NodeStatus_NODE_STATUS_READY)
}

// setLocked stores id with status at the next modify index, as a raft
// write would.
func (f *fakeNodes) setLocked(id string, status pb.NodeStatus) {
	f.nodes[id] = &pb.Node{Id: id, Name: id, Status: status, ModifyIndex: f.nodes[id].GetModifyIndex() + 1}
}

// waitingHeartbeat sends a heartbeat from id in the background and fails
// the test unless it is still waiting once the bubble is idle (why says
// what it waits for); its answer arrives on the returned channel.
func waitingHeartbeat(t *testing.T, h *Heartbeater, id, why string) <-chan error {
	t.Helper()
	beat := make(chan error, 1)
	go func() { beat <- h.Heartbeat(context.Background(), id, testTTL) }()
	synctest.Wait()
	select {
	case err := <-beat:
		t.Fatalf("heartbeat answered (%v) while %s", err, why)
	default:
	}
	return beat
}

func (f *fakeNodes) status(id string) pb.NodeStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[id].GetStatus()
}

func (f *fakeNodes) downTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.downs...)
}

// stallingClock is the real clock (the bubble's, under synctest), except
// that callbacks of timers armed while stall is set wait for it to close
// before running: a timer that fired but whose callback has not yet run,
// as a loaded machine produces.
type stallingClock struct {
	clock.Real
	mu    sync.Mutex
	stall chan struct{}
}

func (c *stallingClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	stall := c.stall
	c.mu.Unlock()
	return time.AfterFunc(d, func() {
		if stall != nil {
			<-stall
		}
		f()
	})
}

func (c *stallingClock) setStall(ch chan struct{}) {
	c.mu.Lock()
	c.stall = ch
	c.mu.Unlock()
}

const (
	testTTL   = 10 * time.Second
	testGrace = 5 * time.Second
)

// A timer of one leadership that fired but ran late must not mark a node
// down in the next leadership, which gives the node TTL + grace afresh.
func TestHeartbeatTimerOfAnEarlierLeadershipIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newFakeNodes("n1")
		clock := &stallingClock{}
		h := NewHeartbeater(nodes, clock, testTTL, testGrace, testutil.Logger(t))

		stalled := make(chan struct{})
		clock.setStall(stalled)
		h.Start() // first leadership: n1 expires at TTL + grace
		clock.setStall(nil)
		time.Sleep(testTTL + testGrace)
		synctest.Wait() // its timer fired; the callback is stalled

		h.Stop()  // leadership lost, too late to stop that timer
		h.Start() // leadership regained: n1 has until now + TTL + grace
		second := time.Now()
		close(stalled)
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 0 {
			t.Fatalf("node marked down at %v by the previous leadership's timer, %s into a grace of %s",
				downs[0], downs[0].Sub(second), testTTL+testGrace)
		}

		time.Sleep(testTTL + testGrace - time.Nanosecond)
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 0 {
			t.Fatalf("node marked down %s into a grace of %s", downs[0].Sub(second), testTTL+testGrace)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 1 || !downs[0].Equal(second.Add(testTTL+testGrace)) {
			t.Fatalf("down-markings %v, want one at %v", downs, second.Add(testTTL+testGrace))
		}
	})
}

// A heartbeat's reset makes the callback of the timer it replaced stale,
// even when that callback already fired and runs late.
func TestHeartbeatResetOutrunsALateCallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newFakeNodes("n1")
		clock := &stallingClock{}
		h := NewHeartbeater(nodes, clock, testTTL, testGrace, testutil.Logger(t))
		h.Start()
		stalled := make(chan struct{})
		clock.setStall(stalled)
		h.Reset("n1", testTTL)
		clock.setStall(nil)
		time.Sleep(testTTL)
		synctest.Wait() // fired, callback stalled
		h.Reset("n1", testTTL)
		close(stalled)
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 0 {
			t.Fatalf("a heartbeat's reset was overtaken by the timer it replaced: down at %v", downs[0])
		}
		time.Sleep(testTTL)
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 1 {
			t.Fatalf("down-markings %v, want one a TTL after the last heartbeat", downs)
		}
	})
}

// A snapshot restore re-arms the timers only while they run: whichever way
// it interleaves with the end of the leadership, no timer is left running
// on a server that no longer leads.
func TestRestoreAndLeadershipLossLeaveNoTimers(t *testing.T) {
	for _, tt := range []struct {
		name string
		run  func(h *Heartbeater)
	}{
		{"loss then restore", func(h *Heartbeater) { h.Stop(); h.Rearm() }},
		{"restore then loss", func(h *Heartbeater) { h.Rearm(); h.Stop() }},
		{"concurrently", func(h *Heartbeater) {
			var wg sync.WaitGroup
			wg.Go(h.Stop)
			wg.Go(h.Rearm)
			wg.Wait()
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nodes := newFakeNodes("n1", "n2")
				h := NewHeartbeater(nodes, clock.Real{}, testTTL, testGrace, testutil.Logger(t))
				h.Start()
				tt.run(h)
				if h.Tracked("n1") || h.Tracked("n2") {
					t.Fatal("timers armed on a server whose leadership ended")
				}
				time.Sleep(10 * (testTTL + testGrace))
				synctest.Wait()
				if downs := nodes.downTimes(); len(downs) != 0 {
					t.Fatalf("a server that no longer leads marked nodes down at %v", downs)
				}
				// Heartbeats reaching it do not arm timers either.
				h.Reset("n1", testTTL)
				if h.Tracked("n1") {
					t.Fatal("a heartbeat armed a timer on a server that does not lead")
				}
			})
		})
	}
}

// While the timers run, a restore re-arms them from the state it brought:
// nodes it dropped lose their timers, nodes it added get TTL + grace.
func TestRestoreRearmsTimersFromTheRestoredNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newFakeNodes("old")
		h := NewHeartbeater(nodes, clock.Real{}, testTTL, testGrace, testutil.Logger(t))
		h.Start()
		time.Sleep(testTTL)
		nodes.mu.Lock()
		nodes.nodes = newFakeNodes("restored").nodes
		nodes.mu.Unlock()
		restoredAt := time.Now()
		h.Rearm()
		if h.Tracked("old") || !h.Tracked("restored") {
			t.Fatalf("after rearm: old tracked %t, restored tracked %t", h.Tracked("old"), h.Tracked("restored"))
		}
		time.Sleep(testTTL + testGrace)
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 1 || !downs[0].Equal(restoredAt.Add(testTTL+testGrace)) {
			t.Fatalf("down-markings %v, want the restored node's at %v", downs, restoredAt.Add(testTTL+testGrace))
		}
		// A closed heartbeater (server shut down) never starts again.
		h.Close()
		h.Start()
		if h.Tracked("restored") {
			t.Fatal("timers armed after close")
		}
	})
}

// A heartbeat that lands while its node's down-marking is in flight waits
// for it and then brings the node back; it does not answer OK for a node
// about to go down (which then stayed down until the next heartbeat).
func TestHeartbeatDuringADownMarkingBringsTheNodeBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newFakeNodes("n1")
		release := make(chan struct{})
		nodes.holdDown = release
		h := NewHeartbeater(nodes, clock.Real{}, testTTL, testGrace, testutil.Logger(t))
		h.Start()
		defer h.Stop()
		time.Sleep(testTTL + testGrace)
		synctest.Wait() // the timer fired; its down-marking is in flight

		beat := waitingHeartbeat(t, h, "n1", "the node's down-marking was in flight")
		close(release)
		synctest.Wait()
		if err := <-beat; err != nil {
			t.Fatal(err)
		}
		if got := nodes.status("n1"); got != pb.NodeStatus_NODE_STATUS_READY {
			t.Fatalf("node after a heartbeat that raced its down-marking: %s, want ready", got)
		}
		if len(nodes.downTimes()) != 1 || len(nodes.readys) != 1 {
			t.Fatalf("down-markings %v, ready-markings %v; want one of each", nodes.downTimes(), nodes.readys)
		}
		if !h.Tracked("n1") {
			t.Fatal("the heartbeat left no timer for the node")
		}
	})
}

// A heartbeat waiting for a down-marking gives up with its caller.
func TestHeartbeatWaitingForADownMarkingHonoursItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newFakeNodes("n1")
		nodes.holdDown = make(chan struct{})
		h := NewHeartbeater(nodes, clock.Real{}, testTTL, testGrace, testutil.Logger(t))
		h.Start()
		time.Sleep(testTTL + testGrace)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := h.Heartbeat(ctx, "n1", testTTL); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("heartbeat past its deadline: %v, want context.DeadlineExceeded", err)
		}
		// Leadership ends: stop cancels the down-marking and returns once
		// it has ended, having marked nothing.
		h.Stop()
		if len(nodes.downTimes()) != 0 {
			t.Fatalf("a cancelled down-marking marked the node down at %v", nodes.downTimes())
		}
		h.mu.Lock()
		inFlight := len(h.expiring)
		h.mu.Unlock()
		if inFlight != 0 {
			t.Fatalf("%d down-markings still in flight after stop returned", inFlight)
		}
	})
}

// A restore that re-arms a node while its expired timer's callback is
// still reading the node makes that callback stand down: the node has a
// fresh TTL + grace from the restored state.
func TestRestoreDuringAnExpiryCancelsItsDownMarking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newFakeNodes("n1")
		read := make(chan struct{})
		nodes.holdRead = read
		h := NewHeartbeater(nodes, clock.Real{}, testTTL, testGrace, testutil.Logger(t))
		h.Start()
		defer h.Stop()
		time.Sleep(testTTL + testGrace)
		synctest.Wait() // the callback reads the node, held
		rearmed := make(chan struct{})
		go func() {
			h.Rearm() // returns once the callback ended
			close(rearmed)
		}()
		synctest.Wait()
		restoredAt := time.Now()
		nodes.mu.Lock()
		nodes.holdRead = nil
		nodes.mu.Unlock()
		close(read)
		<-rearmed
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 0 {
			t.Fatalf("node marked down at %v by a timer the restore replaced", downs)
		}
		time.Sleep(testTTL + testGrace)
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 1 || !downs[0].Equal(restoredAt.Add(testTTL+testGrace)) {
			t.Fatalf("down-markings %v, want one at %v", downs, restoredAt.Add(testTTL+testGrace))
		}
	})
}

// A registration that commits while its node's down-marking is in flight
// (Register does not wait for it) wins: the marking was decided on the
// node before the registration, so it changes nothing.
func TestRegistrationOvertakesAnInFlightDownMarking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newFakeNodes("n1")
		release := make(chan struct{})
		nodes.holdDown = release
		h := NewHeartbeater(nodes, clock.Real{}, testTTL, testGrace, testutil.Logger(t))
		h.Start()
		defer h.Stop()
		time.Sleep(testTTL + testGrace)
		synctest.Wait() // the timer fired; its marking passed its checks and waits in raft

		nodes.register("n1") // what Register does: commit, then re-arm
		h.Reset("n1", testTTL)
		close(release)
		synctest.Wait()
		if got := nodes.status("n1"); got != pb.NodeStatus_NODE_STATUS_READY {
			t.Fatalf("node registered while its down-marking was in flight: %s, want ready", got)
		}
		if len(nodes.downTimes()) != 0 {
			t.Fatalf("stale down-marking applied at %v", nodes.downTimes())
		}
		if !h.Tracked("n1") {
			t.Fatal("the registration's timer is gone")
		}
	})
}

// Two expiries of one node can overlap (a registration re-arms the node
// while the first marking is slow): the first to finish must not drop the
// second's record, or a heartbeat would stop waiting for the second.
func TestOverlappingExpiriesKeepEachOthersRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newFakeNodes("n1")
		first, second := make(chan struct{}), make(chan struct{})
		nodes.holdQueue = []chan struct{}{first, second}
		h := NewHeartbeater(nodes, clock.Real{}, testTTL, testGrace, testutil.Logger(t))
		h.Start()
		defer h.Stop()
		time.Sleep(testTTL + testGrace)
		synctest.Wait() // expiry 1 in flight

		nodes.register("n1")
		h.Reset("n1", testTTL)
		time.Sleep(testTTL)
		synctest.Wait() // expiry 2 in flight

		close(first)
		synctest.Wait() // expiry 1 done (refused: the node changed)
		beat := waitingHeartbeat(t, h, "n1", "expiry 2 was in flight: expiry 1 dropped its record")
		close(second)
		synctest.Wait()
		if err := <-beat; err != nil {
			t.Fatal(err)
		}
		if got := nodes.status("n1"); got != pb.NodeStatus_NODE_STATUS_READY {
			t.Fatalf("node after its heartbeat: %s, want ready", got)
		}
	})
}

// A down-marking already proposing when a snapshot restore re-arms the
// timers was decided on the replaced state: rearm cancels it and returns
// once it ended, so it never marks a node of the restored state down.
func TestRestoreCancelsADownMarkingInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newFakeNodes("n1")
		nodes.holdDown = make(chan struct{})
		h := NewHeartbeater(nodes, clock.Real{}, testTTL, testGrace, testutil.Logger(t))
		h.Start()
		defer h.Stop()
		time.Sleep(testTTL + testGrace)
		synctest.Wait() // the down-marking is proposing, held
		rearmed := make(chan struct{})
		go func() {
			h.Rearm()
			close(rearmed)
		}()
		synctest.Wait()
		restoredAt := time.Now()
		close(nodes.holdDown) // a marking still proposing goes through now
		<-rearmed
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 0 {
			t.Fatalf("node marked down at %v by a marking decided before the restore", downs)
		}
		time.Sleep(testTTL + testGrace)
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 1 || !downs[0].Equal(restoredAt.Add(testTTL+testGrace)) {
			t.Fatalf("down-markings %v, want one at %v (the re-armed timer)", downs, restoredAt.Add(testTTL+testGrace))
		}
	})
}
