package taskrunner

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// Driver events are what a task's driver says about it on its TaskEvents
// stream ("Downloading image …", "OOM killed", a plugin's warning). The
// client routes each to the runner of its attempt (HasAttempt), which
// records it as a task event of type DriverEventType: the driver's message,
// its annotations as the details.
//
// Delivery never blocks the driver's stream: DriverEvent queues the event
// and returns. A flusher goroutine, running only while events are queued,
// records what is queued in one state change, then waits
// DriverEventInterval before the next, so a driver spamming progress makes
// at most a few state writes (and alloc updates) a second per task. Events
// of the same kind (sameKind) in a row are coalesced into the newest, with
// DetailCoalesced counting them; while the flusher waits, at most
// driverEventQueue distinct events are queued and the oldest are dropped
// beyond that, counted in DetailDropped of the newest event recorded next and in
// DriverEventsDropped. The task's event list stays bounded as for every
// event (maxEvents).
const (
	// DriverEventType is the type of the task events a driver emits.
	DriverEventType = "Driver"
	// DetailCoalesced is the detail of a driver event that stands for
	// several of the same kind in a row: how many.
	DetailCoalesced = "coalesced"
	// DetailDropped is the detail of a driver event recorded after
	// events were dropped because the runner fell behind: how many were
	// dropped since the previous recording. It is on the newest event of
	// the recording, which the task's bounded event list keeps.
	DetailDropped = "dropped"
	// DriverEventInterval is the least time between two recordings of a
	// task's driver events.
	DriverEventInterval = 250 * time.Millisecond
	// driverEventQueue bounds the events queued for one task.
	driverEventQueue = 32
)

// driverEvents is a runner's queue of driver events.
type driverEvents struct {
	mu       sync.Mutex
	pending  []*pb.TaskEvent
	dropped  int // since the last recording
	total    uint64
	flushing bool
	// applyMu is held while a batch is recorded; Shutdown takes it after
	// ending the runner's context, so nothing is recorded after it.
	applyMu sync.Mutex
}

// HasAttempt reports whether taskID is the driver task ID of this task's
// newest attempt (starting, running or ended) or of the one before it: a
// driver's events about them belong to this task.
func (tr *TaskRunner) HasAttempt(taskID string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return taskID != "" && (taskID == tr.attempts[0] || taskID == tr.attempts[1])
}

// newAttempt makes id the newest attempt; tr.mu is held (or tr is not
// shared yet).
func (tr *TaskRunner) newAttempt(id string) {
	if id != "" && id != tr.attempts[0] {
		tr.attempts[1], tr.attempts[0] = tr.attempts[0], id
	}
}

// DriverEvent queues ev, an event the driver emitted about this task, to
// be recorded as a task event; it never blocks.
func (tr *TaskRunner) DriverEvent(ev *driverpb.TaskEvent) {
	at := ev.GetTimestamp()
	if at <= 0 {
		at = tr.cfg.Now().UnixNano()
	}
	te := &pb.TaskEvent{Type: DriverEventType, OccurredAt: at, Message: ev.GetMessage(), Details: maps.Clone(ev.GetAnnotations())}
	q := &tr.devents
	q.mu.Lock()
	defer q.mu.Unlock()
	if tr.ctx.Err() != nil {
		return
	}
	if n := len(q.pending); n > 0 && sameKind(q.pending[n-1], te) {
		q.pending[n-1] = coalesce(q.pending[n-1], te)
	} else {
		if len(q.pending) == driverEventQueue {
			q.pending = append(q.pending[:0], q.pending[1:]...)
			q.dropped++
			q.total++
		}
		q.pending = append(q.pending, te)
	}
	if !q.flushing {
		q.flushing = true
		go tr.flushDriverEvents()
	}
}

// DriverEventsDropped is how many driver events this runner dropped
// because it fell behind.
func (tr *TaskRunner) DriverEventsDropped() uint64 {
	tr.devents.mu.Lock()
	defer tr.devents.mu.Unlock()
	return tr.devents.total
}

// flushDriverEvents records the queued events, a batch per
// DriverEventInterval, until none are queued or the runner shuts down.
func (tr *TaskRunner) flushDriverEvents() {
	q := &tr.devents
	for {
		q.mu.Lock()
		batch, dropped := q.pending, q.dropped
		q.pending, q.dropped = nil, 0
		if len(batch) == 0 || tr.ctx.Err() != nil {
			q.flushing = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		if dropped > 0 {
			tr.logger.Warn("task runner fell behind its driver's events; dropped the oldest", "dropped", dropped)
			last := batch[len(batch)-1]
			last.Details = withDetail(last.Details, DetailDropped, strconv.Itoa(dropped))
		}
		q.applyMu.Lock()
		if tr.ctx.Err() == nil {
			tr.update(func(st *pb.TaskState) {
				for _, ev := range batch {
					appendDriverEvent(st, ev)
				}
			})
		}
		q.applyMu.Unlock()
		t := time.NewTimer(DriverEventInterval)
		select {
		case <-t.C:
		case <-tr.ctx.Done():
			t.Stop()
		}
	}
}

// stopDriverEvents ends the recording of driver events; the runner's
// context is already done.
func (tr *TaskRunner) stopDriverEvents() {
	tr.devents.applyMu.Lock()
	defer tr.devents.applyMu.Unlock()
}

// appendDriverEvent puts ev among the task's events in time order (a
// driver's event can be recorded after the runner's own later ones: an
// "OOM killed" waiting out DriverEventInterval while the runner records
// the exit), coalescing it into the event before it when that is of the
// same kind. The oldest events beyond maxEvents go.
func appendDriverEvent(st *pb.TaskState, ev *pb.TaskEvent) {
	i := len(st.Events)
	for i > 0 && st.Events[i-1].GetOccurredAt() > ev.GetOccurredAt() {
		i--
	}
	if i > 0 && sameKind(st.Events[i-1], ev) {
		st.Events[i-1] = coalesce(st.Events[i-1], ev)
		return
	}
	st.Events = slices.Insert(st.Events, i, ev)
	if n := len(st.Events); n > maxEvents {
		st.Events = append([]*pb.TaskEvent(nil), st.Events[n-maxEvents:]...)
	}
}

// sameKind reports whether a and b are driver events of the same kind:
// the same message and details (keys and values) once every number is
// masked, a number being a run of digits not glued to a letter before it
// ("Downloading: 12 MB of 40 MB" and "… 20 MB of 40 MB" are one kind,
// "received SIGUSR1" and "received SIGUSR2" are two). The counts berth
// adds (DetailCoalesced, DetailDropped) are not compared.
func sameKind(a, b *pb.TaskEvent) bool {
	if a.GetType() != DriverEventType || b.GetType() != DriverEventType || a.GetFailed() || b.GetFailed() ||
		maskNumbers(a.GetMessage()) != maskNumbers(b.GetMessage()) {
		return false
	}
	ad, bd := a.GetDetails(), b.GetDetails()
	n := 0
	for k, av := range ad {
		if k == DetailCoalesced || k == DetailDropped {
			continue
		}
		bv, ok := bd[k]
		if !ok || maskNumbers(av) != maskNumbers(bv) {
			return false
		}
		n++
	}
	for k := range bd {
		if k != DetailCoalesced && k != DetailDropped {
			n--
		}
	}
	return n == 0
}

// coalesce returns newer standing for older too: its message, details and
// time, with the count of both and the drops reported in either.
func coalesce(older, newer *pb.TaskEvent) *pb.TaskEvent {
	count := func(ev *pb.TaskEvent, key string, none int) int {
		if n, err := strconv.Atoi(ev.GetDetails()[key]); err == nil && n > 0 {
			return n
		}
		return none
	}
	out := &pb.TaskEvent{Type: newer.GetType(), OccurredAt: newer.GetOccurredAt(), Message: newer.GetMessage(), Details: maps.Clone(newer.GetDetails())}
	out.Details = withDetail(out.Details, DetailCoalesced, strconv.Itoa(count(older, DetailCoalesced, 1)+count(newer, DetailCoalesced, 1)))
	if d := count(older, DetailDropped, 0) + count(newer, DetailDropped, 0); d > 0 {
		out.Details[DetailDropped] = strconv.Itoa(d)
	}
	return out
}

func withDetail(d map[string]string, k, v string) map[string]string {
	if d == nil {
		d = map[string]string{}
	}
	d[k] = v
	return d
}

// maskNumbers replaces each number in s (a digit run not preceded by a
// letter) by '#'.
func maskNumbers(s string) string {
	out := make([]byte, 0, len(s))
	// digits: in a digit run; masked: that run is a number.
	digits, masked := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			digits = false
			out = append(out, c)
			continue
		}
		if !digits {
			digits, masked = true, i == 0 || !isLetter(s[i-1])
			if masked {
				out = append(out, '#')
			}
		}
		if !masked {
			out = append(out, c)
		}
	}
	return string(out)
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
