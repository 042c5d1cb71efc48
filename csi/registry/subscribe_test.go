package registry

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestSubscribeSeesChangesInOrder(t *testing.T) {
	r := New(newFakeStore())
	events := r.Subscribe(t.Context())

	mustRegister(t, r, reg(monolith, "hostpath", "a1", 1))
	mustRegister(t, r, reg(node, "ebs", "a2", 2))
	if err := r.SetHealth("a2", "ebs", false, "probe: not ready"); err != nil {
		t.Fatal(err)
	}
	if err := r.Deregister("a1", "hostpath"); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		kind    EventKind
		key     Key
		healthy bool
	}{
		{EventRegistered, key(controller, "hostpath", "a1"), true},
		{EventRegistered, key(node, "hostpath", "a1"), true},
		{EventRegistered, key(node, "ebs", "a2"), true},
		{EventRegistered, key(node, "ebs", "a2"), false},
		{EventDeregistered, key(controller, "hostpath", "a1"), true},
		{EventDeregistered, key(node, "hostpath", "a1"), true},
	}
	for i, w := range want {
		ev := next(t, events)
		if ev.Seq != uint64(i+1) || ev.Kind != w.kind || ev.Entry.Key() != w.key || ev.Entry.Registration.GetHealthy() != w.healthy {
			t.Fatalf("event %d = seq %d %s %s healthy=%v, want seq %d %s %s healthy=%v",
				i, ev.Seq, ev.Kind, ev.Entry.Key(), ev.Entry.Registration.GetHealthy(), i+1, w.kind, w.key, w.healthy)
		}
	}
	select {
	case ev := <-events:
		t.Fatalf("unexpected event %+v", ev)
	default:
	}
}

// churn changes the registry from several goroutines at once, each on its
// own alloc: registrations, health changes and deregistrations.
func churn(t *testing.T, r *Registry, writers, rounds int) {
	t.Helper()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			alloc := fmt.Sprintf("w%d", w)
			for i := range rounds {
				var err error
				switch p := fmt.Sprintf("p%d", (i/4)%5); i % 4 {
				case 0:
					err = r.Register(reg(monolith, p, alloc, uint64(i)))
				case 1:
					err = r.Register(reg(node, p+"-node", alloc, uint64(i)))
				case 2:
					err = r.SetHealth(alloc, p, false, fmt.Sprintf("round %d", i))
				case 3:
					err = r.Deregister(alloc, p)
				}
				if err != nil {
					t.Errorf("writer %d round %d: %v", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestSlowSubscriberLosesNothing: a subscriber that reads nothing while
// thousands of changes are made neither blocks them nor loses any; what it
// reads afterwards is every change, in the order the store got them.
func TestSlowSubscriberLosesNothing(t *testing.T) {
	store := newFakeStore()
	r := New(store)
	slow := r.Subscribe(t.Context())
	churn(t, r, 4, 400) // returns only if no Register waits on the reader

	ops := store.opLog()
	if len(ops) < 4*400 {
		t.Fatalf("store saw %d writes, want at least %d", len(ops), 4*400)
	}
	for i, op := range ops {
		ev := next(t, slow)
		if ev.Seq != uint64(i+1) || eventLine(ev) != op {
			t.Fatalf("event %d = seq %d %q, want seq %d %q (the store's write %d)", i, ev.Seq, eventLine(ev), i+1, op, i)
		}
	}
	select {
	case ev := <-slow:
		t.Fatalf("event %+v with no store write behind it", ev)
	default:
	}
}

// TestSubscribeMidStream: a subscriber that joins while writers run gets a
// snapshot, then live events numbered right after it, and the two together
// rebuild exactly the registry's entries — no gap, no duplicate.
func TestSubscribeMidStream(t *testing.T) {
	r := New(newFakeStore())
	ctx := t.Context()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); churn(t, r, 3, 300) }()
	// Join once some changes are made, while the writers still run.
	for deadline := time.Now().Add(10 * time.Second); r.seqNow() < 50; {
		if time.Now().After(deadline) {
			t.Fatal("writers made no progress in 10s")
		}
		time.Sleep(time.Millisecond)
	}
	events := r.Subscribe(ctx)
	wg.Wait()
	mustRegister(t, r, reg(node, "marker", "m", 1)) // the last change
	last := r.seqNow()

	state := make(map[Key]Entry)
	ev := next(t, events)
	snapshotSeq := ev.Seq
	for ; ev.Seq == snapshotSeq && ev.Kind == EventRegistered; ev = next(t, events) {
		if _, dup := state[ev.Entry.Key()]; dup {
			t.Fatalf("snapshot holds %s twice", ev.Entry.Key())
		}
		state[ev.Entry.Key()] = ev.Entry
		if ev.Seq == last { // the snapshot was taken after the last change
			break
		}
	}
	if snapshotSeq == 0 || snapshotSeq >= last {
		t.Fatalf("snapshot at change %d, want one taken mid-stream (before %d)", snapshotSeq, last)
	}
	for want := snapshotSeq + 1; ; want++ {
		if ev.Seq != want {
			t.Fatalf("live event seq %d, want %d (gap or duplicate)", ev.Seq, want)
		}
		switch ev.Kind {
		case EventRegistered:
			state[ev.Entry.Key()] = ev.Entry
		case EventDeregistered:
			if _, ok := state[ev.Entry.Key()]; !ok {
				t.Fatalf("deregistration of %s that was never registered", ev.Entry.Key())
			}
			delete(state, ev.Entry.Key())
		}
		if ev.Seq == last {
			break
		}
		ev = next(t, events)
	}
	var got []string
	for k, e := range state {
		if e.Key() != k {
			t.Fatalf("entry %s under key %s", e.Key(), k)
		}
		got = append(got, fmt.Sprintf("%s healthy=%v", k, e.Registration.GetHealthy()))
	}
	var want []string
	for _, e := range r.List(anyType) {
		want = append(want, fmt.Sprintf("%s healthy=%v", e.Key(), e.Registration.GetHealthy()))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("rebuilt from events:\n%q\nregistry:\n%q", got, want)
	}
}

func TestSubscribeSnapshotOfCurrentEntries(t *testing.T) {
	r := New(newFakeStore())
	mustRegister(t, r, reg(monolith, "hostpath", "a1", 1))
	mustRegister(t, r, reg(node, "gone", "a2", 2))
	if err := r.Deregister("a2", "gone"); err != nil {
		t.Fatal(err)
	}
	events := r.Subscribe(t.Context())
	for _, want := range []Key{key(controller, "hostpath", "a1"), key(node, "hostpath", "a1")} {
		if ev := next(t, events); ev.Kind != EventRegistered || ev.Entry.Key() != want || ev.Seq != 4 {
			t.Fatalf("snapshot event = seq %d %s %s, want seq 4 registered %s", ev.Seq, ev.Kind, ev.Entry.Key(), want)
		}
	}
	if err := r.DeregisterAlloc("a1"); err != nil {
		t.Fatal(err)
	}
	for i, want := range []Key{key(controller, "hostpath", "a1"), key(node, "hostpath", "a1")} {
		if ev := next(t, events); ev.Kind != EventDeregistered || ev.Entry.Key() != want || ev.Seq != uint64(5+i) {
			t.Fatalf("live event = seq %d %s %s, want seq %d deregistered %s", ev.Seq, ev.Kind, ev.Entry.Key(), 5+i, want)
		}
	}
}

func TestSubscribersGetTheSameStream(t *testing.T) {
	r := New(newFakeStore())
	const n = 3
	var chans []<-chan Event
	for range n {
		chans = append(chans, r.Subscribe(t.Context()))
	}
	churn(t, r, 2, 100)
	last := r.seqNow()
	var streams [n][]string
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range ch {
				streams[i] = append(streams[i], fmt.Sprintf("%d %s", ev.Seq, eventLine(ev)))
				if ev.Seq == last {
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(streams[0]) != int(last) {
		t.Fatalf("subscriber 0 got %d events, want %d", len(streams[0]), last)
	}
	for i := 1; i < n; i++ {
		if !slices.Equal(streams[i], streams[0]) {
			t.Fatalf("subscriber %d's stream differs from subscriber 0's", i)
		}
	}
}

func TestCancelUnsubscribes(t *testing.T) {
	r := New(newFakeStore())
	ctx, cancel := context.WithCancel(t.Context())
	events := r.Subscribe(ctx)
	mustRegister(t, r, reg(node, "p", "a", 1)) // queued, never read
	cancel()
	// The channel closes (possibly after the queued event).
	for closed := false; !closed; {
		select {
		case _, ok := <-events:
			closed = !ok
		case <-time.After(10 * time.Second):
			t.Fatal("channel not closed within 10s of cancel")
		}
	}
	if n := r.subscribers(); n != 0 {
		t.Fatalf("%d subscribers after cancel, want 0", n)
	}
	mustRegister(t, r, reg(node, "p", "b", 2)) // no one to queue to; must not block
}
