package pluginproc

import "time"

// Backoff is how long a supervisor waits before restarting a plugin that
// exited or failed to start: Initial, doubling with every consecutive
// failure, never more than Max.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// DefaultBackoff is the restart backoff of a supervisor configured with none.
var DefaultBackoff = Backoff{Initial: time.Second, Max: time.Minute}

// Delay returns the wait before attempt (1 for the first retry).
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Initial
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Sleep waits d or until done is closed; it reports whether d elapsed.
func Sleep(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
