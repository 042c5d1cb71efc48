package evals

import (
	"context"
	"time"

	"berth.dev/berth/internal/clock"
)

// feedRetryDelay is how long the feed waits, with no change to watch,
// before it runs again after a pass that failed or a worker that gave an
// evaluation up unrecorded (retryFeed).
const feedRetryDelay = time.Second

// feedRetryTimer ends the feed's wait (cancel) feedRetryDelay after it
// began when retry is set, or after a worker asked for a pass
// (retryFeed) during the wait; it returns when the wait ends (wctx).
func (r *Runner) feedRetryTimer(wctx context.Context, cancel context.CancelFunc, retry bool) {
	var t clock.Timer
	arm := func() {
		if t == nil {
			t = r.cfg.Clock.AfterFunc(feedRetryDelay, cancel)
		}
	}
	if retry {
		arm()
	}
	for {
		select {
		case <-r.feedRetry:
			arm()
		case <-wctx.Done():
			if t != nil {
				t.Stop()
			}
			return
		}
	}
}

// retryFeed asks the feed for a pass within feedRetryDelay even if
// nothing it watches changes: a blocked evaluation woken in memory that
// the broker gave up (its failure could not be recorded, forget with 0)
// keeps its row blocked, and only a pass wakes it again; on an idle
// cluster none would come.
func (r *Runner) retryFeed() {
	select {
	case r.feedRetry <- struct{}{}:
	default:
	}
}
