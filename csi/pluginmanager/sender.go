package pluginmanager

import (
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/backoff"
)

// outbox holds the newest set for the sender: a new set replaces one not
// yet sent, so a burst of changes is one send and a set older than one
// already sent is never sent after it.
type outbox struct {
	mu      sync.Mutex
	set     Set
	version uint64
	again   bool
	wake    chan struct{}
}

func newOutbox() *outbox { return &outbox{wake: make(chan struct{}, 1)} }

func (o *outbox) offer(s Set) {
	o.mu.Lock()
	o.set, o.version = s, o.version+1
	o.mu.Unlock()
	o.signal()
}

func (o *outbox) resend() {
	o.mu.Lock()
	o.again = true
	o.mu.Unlock()
	o.signal()
}

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// take returns the newest set if it is newer than sent or a resend was
// asked (and there is a set at all).
func (o *outbox) take(sent uint64) (Set, uint64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.version == 0 || (o.version == sent && !o.again) {
		return Set{}, 0, false
	}
	o.again = false
	return o.set, o.version, true
}

// sendLoop sends each new set as soon as it is offered, one send at a
// time. A failed send (the version gate's FailedPrecondition while a
// server is too old, no leader, no server answering) is retried with
// capped backoff, with whatever set is newest by then; a newer set or a
// Resend during the backoff ends it (the node may just have registered).
func (m *Manager) sendLoop() {
	var sent uint64
	wait := backoff.Backoff{Initial: m.cfg.SendRetryStart, Max: m.cfg.SendRetryMax}
	failures := 0
	var lastErr string
	for {
		set, v, ok := m.out.take(sent)
		if !ok {
			select {
			case <-m.out.wake:
				continue
			case <-m.ctx.Done():
				return
			}
		}
		start := time.Now()
		err := m.cfg.Send(m.ctx, set)
		if m.ctx.Err() != nil {
			return
		}
		if err == nil {
			sent, failures, lastErr = v, 0, ""
			m.logger.Debug("csi plugin set sent", "controllers", len(set.Controllers), "nodes", len(set.Nodes), "took", time.Since(start))
			continue
		}
		// The set is sent again: the version is not marked sent.
		m.out.mu.Lock()
		m.out.again = true
		m.out.mu.Unlock()
		failures++
		retry := wait.Delay(failures)
		if msg := status.Code(err).String() + err.Error(); msg != lastErr {
			m.logger.Warn("sending the node's csi plugins to the servers failed; retrying", "error", err, "retry_in", retry)
			lastErr = msg
		} else {
			m.logger.Debug("sending the node's csi plugins failed again", "error", err, "retry_in", retry)
		}
		t := time.NewTimer(retry)
		select {
		case <-t.C:
		case <-m.out.wake:
			t.Stop()
		case <-m.ctx.Done():
			t.Stop()
			return
		}
	}
}
