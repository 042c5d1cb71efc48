package registry

import (
	"context"
	"sync"

	"berth.dev/berth/rpc/pb"
)

// EventKind says what happened to an entry.
type EventKind int

const (
	// EventRegistered: the entry was added, or replaced one with the same
	// key (a re-registration, a health change, a restored entry probed); a
	// subscriber keeps the latest per key.
	EventRegistered EventKind = iota + 1
	// EventDeregistered: the entry was removed.
	EventDeregistered
)

// String names the kind for logs.
func (k EventKind) String() string {
	switch k {
	case EventRegistered:
		return "registered"
	case EventDeregistered:
		return "deregistered"
	}
	return "unknown"
}

// Event is one change of the registry, or one entry of a new subscriber's
// snapshot.
type Event struct {
	// Seq is the number of the change. Live events have strictly
	// increasing, consecutive numbers. A new subscriber's snapshot events all
	// carry the number of the last change they include, and its first live
	// event is the one after it.
	Seq   uint64
	Kind  EventKind
	Entry Entry
}

// subscriber is one Subscribe call: an unbounded queue the registry
// appends to under its lock and a goroutine that hands the queue out on the
// subscriber's channel, so a slow reader neither loses events nor blocks the
// registry.
type subscriber struct {
	mu    sync.Mutex
	queue []Event
	// wake has room for one signal: the pump need only learn that the
	// queue is not empty, not how often it grew.
	wake chan struct{}
}

// Subscribe returns a channel that receives, first, the registry's current
// entries as EventRegistered events (the snapshot), then every later change
// in order — nothing missed between the two and nothing twice. Events wait
// in an unbounded queue until read, so a slow reader loses none and never
// blocks the registry. The channel is closed when ctx ends; events not yet
// read then are dropped.
func (r *Registry) Subscribe(ctx context.Context) <-chan Event {
	s := &subscriber{wake: make(chan struct{}, 1)}
	ch := make(chan Event)
	r.mu.Lock()
	// The snapshot and the registration of s happen under one hold of
	// r.mu, which every change also holds: a change is either in the
	// snapshot or queued to s, never both and never neither.
	for _, e := range r.listLocked(pb.CSIPluginType_CSI_PLUGIN_TYPE_UNSPECIFIED) {
		s.queue = append(s.queue, Event{Seq: r.seq, Kind: EventRegistered, Entry: e})
	}
	r.subs[s] = struct{}{}
	r.mu.Unlock()
	// The pump looks at the queue before it first waits, so the snapshot
	// needs no wake-up.
	go r.pump(ctx, s, ch)
	return ch
}

// publish queues ev to every subscriber; r.mu is held.
func (r *Registry) publish(ev Event) {
	for s := range r.subs {
		s.push(Event{Seq: ev.Seq, Kind: ev.Kind, Entry: ev.Entry.clone()})
	}
}

func (s *subscriber) push(ev Event) {
	s.mu.Lock()
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// pop takes the oldest queued event, if any.
func (s *subscriber) pop() (Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return Event{}, false
	}
	ev := s.queue[0]
	s.queue[0] = Event{} // let the entry be collected once read
	s.queue = s.queue[1:]
	if len(s.queue) == 0 {
		s.queue = nil // drop the backing array a burst grew
	}
	return ev, true
}

// pump hands s's queue out on ch until ctx ends, then unsubscribes s and
// closes ch.
func (r *Registry) pump(ctx context.Context, s *subscriber, ch chan<- Event) {
	defer func() {
		r.mu.Lock()
		delete(r.subs, s)
		r.mu.Unlock()
		close(ch)
	}()
	for {
		ev, ok := s.pop()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case ch <- ev:
		case <-ctx.Done():
			return
		}
	}
}
