package taskrunner

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// stateLog records what a runner tells OnState; gate, while open (not
// closed), holds the first call until the test closes it.
type stateLog struct {
	mu      sync.Mutex
	states  []*pb.TaskState
	entered chan struct{}
	gate    chan struct{}
}

func newStateLog() *stateLog {
	return &stateLog{entered: make(chan struct{}), gate: make(chan struct{})}
}

func (l *stateLog) onState(st *pb.TaskState, _ string) error {
	l.mu.Lock()
	first := len(l.states) == 0
	l.states = append(l.states, proto.Clone(st).(*pb.TaskState))
	l.mu.Unlock()
	if first {
		close(l.entered)
		<-l.gate
	}
	return nil
}

func (l *stateLog) calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.states)
}

func (l *stateLog) last() *pb.TaskState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.states[len(l.states)-1]
}

func driverEv(msg string, ann map[string]string) *driverpb.TaskEvent {
	return &driverpb.TaskEvent{TaskId: "a.t.1", Timestamp: time.Now().UnixNano(), Message: msg, Annotations: ann}
}

// letters names event i with letters only, so that no two are of a kind.
func letters(i int) string {
	s := ""
	for {
		s = string(rune('a'+i%26)) + s
		if i /= 26; i == 0 {
			return s
		}
	}
}

// A burst of driver events while the runner is stuck recording (a slow
// state write) neither blocks the caller nor grows without bound: at most
// driverEventQueue distinct events wait, the oldest beyond that are
// dropped and counted, events of one kind in a row become one event
// counting them, and the task keeps at most maxEvents events.
func TestDriverEventBurstIsCoalescedAndBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := newStateLog()
		tr := New(Config{OnState: log.onState})
		defer tr.cancel()
		tr.DriverEvent(driverEv("first", nil))
		<-log.entered // the flusher is now stuck in OnState

		const distinct = 40
		for i := range distinct {
			tr.DriverEvent(driverEv("warning "+letters(i), map[string]string{"level": "warn"}))
		}
		const progress = 1000
		for i := range progress {
			tr.DriverEvent(driverEv(fmt.Sprintf("Downloading image x:1.2: %d MB of 2048 MB", i), map[string]string{"done_bytes": strconv.Itoa(i << 20)}))
		}
		// 40 distinct and one progress kind: 41 for 32 places.
		if got, want := tr.DriverEventsDropped(), uint64(distinct+1-driverEventQueue); got != want {
			t.Fatalf("dropped %d events, want %d", got, want)
		}
		close(log.gate)
		time.Sleep(DriverEventInterval) // fake time: the flusher's pause
		synctest.Wait()
		if n := log.calls(); n != 2 {
			t.Fatalf("OnState called %d times, want 2 (one per batch)", n)
		}
		evs := log.last().GetEvents()
		if len(evs) != maxEvents {
			t.Fatalf("%d events kept, want %d", len(evs), maxEvents)
		}
		last := evs[len(evs)-1]
		if last.GetType() != DriverEventType || last.GetMessage() != "Downloading image x:1.2: 999 MB of 2048 MB" ||
			last.GetDetails()[DetailCoalesced] != strconv.Itoa(progress) || last.GetDetails()["done_bytes"] != strconv.Itoa(999<<20) {
			t.Fatalf("last event %v: want the newest progress, counting %d", last, progress)
		}
		if prev := evs[len(evs)-2]; prev.GetMessage() != "warning "+letters(distinct-1) {
			t.Fatalf("event before the progress %v", prev)
		}
	})
}

// Driver events are recorded at most once per DriverEventInterval; those
// arriving meanwhile wait and are recorded together. The first event of a
// batch that follows dropped ones says how many were dropped.
func TestDriverEventsAreRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := newStateLog()
		close(log.gate)
		tr := New(Config{OnState: log.onState})
		defer tr.cancel()
		tr.DriverEvent(driverEv("one", nil))
		synctest.Wait()
		if n := log.calls(); n != 1 {
			t.Fatalf("first event: %d state changes, want 1", n)
		}
		tr.DriverEvent(driverEv("two", nil))
		tr.DriverEvent(driverEv("three", nil))
		synctest.Wait()
		if n := log.calls(); n != 1 {
			t.Fatalf("within the interval: %d state changes, want still 1", n)
		}
		time.Sleep(DriverEventInterval)
		synctest.Wait()
		if n := log.calls(); n != 2 {
			t.Fatalf("after the interval: %d state changes, want 2", n)
		}
		if got := types(log.last()); len(got) != 3 {
			t.Fatalf("events %v", got)
		}
		// The flusher pauses again: a burst meanwhile overflows the queue.
		for i := range driverEventQueue + 2 {
			tr.DriverEvent(driverEv("n "+letters(i), nil))
		}
		time.Sleep(DriverEventInterval)
		synctest.Wait()
		var dropped *pb.TaskEvent
		for _, st := range log.states {
			for _, ev := range st.GetEvents() {
				if ev.GetDetails()[DetailDropped] != "" {
					dropped = ev
				}
			}
		}
		// 34 waited for 32 places: the 2 oldest were dropped.
		if dropped == nil || dropped.GetDetails()[DetailDropped] != "2" || dropped.GetMessage() != "n "+letters(driverEventQueue+1) {
			t.Fatalf("the event after the dropped ones: %v", dropped)
		}
	})
}

// Once the runner is shut down, driver events are no longer recorded.
func TestDriverEventsStopAtShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := newStateLog()
		close(log.gate)
		tr := New(Config{OnState: log.onState})
		close(tr.done) // Run never ran
		tr.Shutdown()
		tr.DriverEvent(driverEv("late", nil))
		synctest.Wait()
		if n := log.calls(); n != 0 {
			t.Fatalf("%d state changes after Shutdown", n)
		}
	})
}

func TestSameKind(t *testing.T) {
	ev := func(msg string, d map[string]string) *pb.TaskEvent {
		return &pb.TaskEvent{Type: DriverEventType, Message: msg, Details: d}
	}
	for _, c := range []struct {
		a, b *pb.TaskEvent
		same bool
	}{
		{ev("Downloading: 12 MB of 40 MB", nil), ev("Downloading: 20 MB of 40 MB", nil), true},
		{ev("50%", map[string]string{"p": "50"}), ev("60%", map[string]string{"p": "60"}), true},
		{ev("received SIGUSR1", nil), ev("received SIGUSR2", nil), false},
		{ev("image sha256:ab", nil), ev("image sha512:ab", nil), false},
		{ev("x", map[string]string{"a": "1"}), ev("x", map[string]string{"b": "1"}), false},
		{ev("x", map[string]string{"a": "1"}), ev("x", nil), false},
		{ev("x", map[string]string{DetailCoalesced: "3"}), ev("x", nil), true},
		{ev("x", nil), &pb.TaskEvent{Type: "Started", Message: "x"}, false},
	} {
		if got := sameKind(c.a, c.b); got != c.same {
			t.Errorf("sameKind(%q %v, %q %v) = %t, want %t", c.a.GetMessage(), c.a.GetDetails(), c.b.GetMessage(), c.b.GetDetails(), got, c.same)
		}
	}
}

// A driver event recorded after the runner's later events goes among
// them in time order.
func TestDriverEventGoesInTimeOrder(t *testing.T) {
	st := &pb.TaskState{Events: []*pb.TaskEvent{
		{Type: "Started", OccurredAt: 10}, {Type: "Terminated", OccurredAt: 30}, {Type: "Not Restarting", OccurredAt: 40}}}
	appendDriverEvent(st, &pb.TaskEvent{Type: DriverEventType, Message: "OOM killed", OccurredAt: 20})
	appendDriverEvent(st, &pb.TaskEvent{Type: DriverEventType, Message: "late", OccurredAt: 50})
	if got := types(st); !slices.Equal(got, []string{"Started", DriverEventType, "Terminated", "Not Restarting", DriverEventType}) {
		t.Fatalf("events %v", got)
	}
	if st.Events[1].GetMessage() != "OOM killed" {
		t.Fatalf("event after Started: %v", st.Events[1])
	}
}

// A driver's events about the task's newest attempt and the one before
// (an exit event arriving after the restart) belong to the task; those of
// older attempts and other IDs do not.
func TestHasAttemptKnowsTheLastTwoAttempts(t *testing.T) {
	d := newFakeDriver()
	tr := newRunner(t, d, nil, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 5, IntervalMs: 60_000, DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	})
	go tr.Run()
	defer func() { tr.SignalKill("test over"); waitRunDone(t, tr) }()
	waitStarts := func(n int) []*driverpb.TaskConfig {
		var s []*driverpb.TaskConfig
		testutil.WaitFor(t, 10*time.Second, func() error {
			if s = d.started(); len(s) < n {
				return fmt.Errorf("%d attempts started, want %d", len(s), n)
			}
			return nil
		})
		return s
	}
	first := waitStarts(1)[0].GetId()
	if !tr.HasAttempt(first) || tr.HasAttempt("a1.web.other") || tr.HasAttempt("") {
		t.Fatal("HasAttempt of the running attempt false, or of another ID true")
	}
	d.exitLast(t, 1)
	waitStarts(2)
	d.exitLast(t, 1)
	s := waitStarts(3)
	if !tr.HasAttempt(s[2].GetId()) || !tr.HasAttempt(s[1].GetId()) || tr.HasAttempt(first) {
		t.Fatalf("after two restarts: newest %t, previous %t, first %t; want true, true, false",
			tr.HasAttempt(s[2].GetId()), tr.HasAttempt(s[1].GetId()), tr.HasAttempt(first))
	}
}
