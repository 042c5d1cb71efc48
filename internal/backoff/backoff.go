package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff is how long to wait before the next try of something that
// failed: Initial after the first failure, doubling with every consecutive
// one, never more than Max. With Jitter j > 0 each wait w is drawn
// uniformly from [w(1-j), w(1+j)] (still capped at Max), so that many
// callers failing together do not all try again together.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	// Jitter is the fraction of each wait drawn at random, in [0, 1].
	Jitter float64
}

// Delay returns the wait before try attempt+1, after attempt consecutive
// failures (1 for the wait after the first failure). Attempts below 1
// count as 1.
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Initial
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter > 0 && d > 0 {
		j := min(b.Jitter, 1)
		lo := float64(d) * (1 - j)
		d = time.Duration(lo + rand.Float64()*(float64(d)*(1+j)-lo))
		d = min(d, b.Max)
	}
	return d
}

// Sleep waits d or until done is closed (a context's Done, a stop
// channel); it reports whether d elapsed.
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
