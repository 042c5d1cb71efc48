package adapters

import (
	"sync"
	"time"
)

// EventKind says what happened to an adapter.
type EventKind int

// The kinds of Event, in the order an adapter usually goes through them.
const (
	// EventStarted: a new adapter process answered its handshake.
	EventStarted EventKind = iota + 1
	// EventReattached: the process a previous client left running was
	// reattached.
	EventReattached
	// EventHealthy: Probe said ready (after a start, or after being
	// unhealthy).
	EventHealthy
	// EventUnhealthy: Probe failed or said not ready; Reason says why.
	EventUnhealthy
	// EventExited: the process exited or stopped answering; a restart
	// follows after Delay.
	EventExited
	// EventStartFailed: a launch failed; a retry follows after Delay
	// unless the failure is for good (an invalid config, Delay 0).
	EventStartFailed
)

var kindNames = map[EventKind]string{
	EventStarted: "started", EventReattached: "reattached", EventHealthy: "healthy",
	EventUnhealthy: "unhealthy", EventExited: "exited", EventStartFailed: "start-failed",
}

func (k EventKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "unknown"
}

// Event is one change of an adapter's process or health.
type Event struct {
	Adapter string
	Kind    EventKind
	// Pid is the adapter process's, when there is one.
	Pid int
	// Reason explains unhealthy, exited and start-failed events.
	Reason string
	// Delay is the wait before the restart that follows an exit or a
	// failed start.
	Delay time.Duration
	Time  time.Time
}

// hub fans events out to subscribers without losing any: each subscriber
// has its own queue, drained by its own goroutine, so a slow consumer
// delays only itself.
type hub struct {
	mu   sync.Mutex
	subs map[*subscriber]struct{}
}

type subscriber struct {
	ch     chan Event
	mu     sync.Mutex
	queue  []Event
	wake   chan struct{}
	cancel chan struct{}
	once   sync.Once
}

func (h *hub) subscribe() (<-chan Event, func()) {
	s := &subscriber{ch: make(chan Event), wake: make(chan struct{}, 1), cancel: make(chan struct{})}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*subscriber]struct{}{}
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	go s.pump()
	return s.ch, func() {
		h.mu.Lock()
		delete(h.subs, s)
		h.mu.Unlock()
		s.once.Do(func() { close(s.cancel) })
	}
}

func (h *hub) publish(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		s.mu.Lock()
		s.queue = append(s.queue, ev)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// pump delivers the queue in order until cancelled, then closes ch.
func (s *subscriber) pump() {
	defer close(s.ch)
	for {
		s.mu.Lock()
		var next *Event
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue = s.queue[1:]
			next = &ev
		}
		s.mu.Unlock()
		if next == nil {
			select {
			case <-s.wake:
				continue
			case <-s.cancel:
				return
			}
		}
		select {
		case s.ch <- *next:
		case <-s.cancel:
			return
		}
	}
}
