// Package backoff is berth's one retry-wait policy: an initial wait that
// doubles with every consecutive failure up to a cap, with optional
// jitter, and a sleep that a context or stop channel cuts short.
//
// Every loop that tries again after a failure (a plugin restart, a claim
// report, a volume teardown, a controller publish) counts its consecutive
// failures and asks Delay for the next wait, instead of growing a wait of
// its own:
//
//	b := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second}
//	for attempt := 1; ; attempt++ {
//		if err := try(); err == nil {
//			return nil
//		}
//		if !backoff.Sleep(ctx.Done(), b.Delay(attempt)) {
//			return ctx.Err()
//		}
//	}
//
// Tests that must not sleep set a tiny Initial and Max, or run under
// testing/synctest, where Sleep's timer is the bubble's fake clock.
package backoff
