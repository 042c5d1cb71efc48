package csi

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/status"
)

// Clock is the one thing Retry needs of time, so tests can wait without
// sleeping.
type Clock interface {
	// Sleep waits for d, or until ctx ends and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock sleeps on real timers.
type RealClock struct{}

// Sleep waits for d or until ctx ends.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ Clock = RealClock{}

// Retry repeats a CSI call while its error is one the call table retries
// the call on (Call.Retryable: CallSpec.RetryOn), waiting with exponential backoff and jitter between attempts. It stops at
// the first success, the first final error, after MaxAttempts, or when the
// context ends. The zero value is usable: zero Initial, Max and Multiplier
// take the DefaultRetry values, a nil Clock is RealClock and a nil Logger
// discards.
type Retry struct {
	// Initial is the wait after the first failed attempt.
	Initial time.Duration
	// Max caps every wait, jitter included.
	Max time.Duration
	// Multiplier grows the wait after each failed attempt.
	Multiplier float64
	// Jitter is the fraction of each wait drawn at random, in [0, 1]: a wait w
	// becomes a uniform draw from [w(1-Jitter), w(1+Jitter)], so that many
	// callers failing together do not retry together.
	Jitter float64
	// MaxAttempts bounds the attempts; 0 retries until the context ends.
	MaxAttempts int
	Clock       Clock
	Logger      hclog.Logger
}

// DefaultRetry returns the policy berth's callers start from.
func DefaultRetry() Retry {
	return Retry{Initial: 250 * time.Millisecond, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2}
}

// Do runs op until it succeeds or must stop, and returns nil or the error
// that stopped it. When the context ends (or MaxAttempts runs out) after a
// retryable failure, the returned error wraps both the last failure (so
// errors.As finds its *Error, and IsUncertain is true: the operation may have
// happened) and the context's error. call and volumeID name the operation in
// the log line written after every failed attempt.
func (r Retry) Do(ctx context.Context, call Call, volumeID string, op func(context.Context) error) error {
	r = r.withDefaults()
	wait := r.Initial
	var last error
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if last == nil {
				return err
			}
			return fmt.Errorf("%w (gave up after %d attempts: %w)", last, attempt-1, err)
		}
		err := op(ctx)
		if err == nil {
			if attempt > 1 {
				r.Logger.Info("csi call succeeded after retries", "call", call, "volume", volumeID, "attempt", attempt)
			}
			return nil
		}
		last = err
		code := status.Code(err)
		if !call.Retryable(err) {
			r.Logger.Warn("csi call failed, not retrying", "call", call, "volume", volumeID, "attempt", attempt, "code", code, "error", err)
			return err
		}
		if r.MaxAttempts > 0 && attempt >= r.MaxAttempts {
			r.Logger.Warn("csi call failed, out of attempts", "call", call, "volume", volumeID, "attempt", attempt, "code", code, "error", err)
			return fmt.Errorf("%w (gave up after %d attempts)", err, attempt)
		}
		d := r.jittered(wait)
		r.Logger.Warn("csi call failed, retrying", "call", call, "volume", volumeID, "attempt", attempt, "code", code, "backoff", d, "error", err)
		if serr := r.Clock.Sleep(ctx, d); serr != nil {
			return fmt.Errorf("%w (gave up after %d attempts: %w)", last, attempt, serr)
		}
		wait = min(time.Duration(float64(wait)*r.Multiplier), r.Max)
	}
}

func (r Retry) withDefaults() Retry {
	d := DefaultRetry()
	if r.Initial <= 0 {
		r.Initial = d.Initial
	}
	if r.Max <= 0 {
		r.Max = d.Max
	}
	if r.Multiplier < 1 {
		r.Multiplier = d.Multiplier
	}
	r.Jitter = min(max(r.Jitter, 0), 1)
	if r.Clock == nil {
		r.Clock = RealClock{}
	}
	if r.Logger == nil {
		r.Logger = hclog.NewNullLogger()
	}
	return r
}

// jittered draws the actual wait for a base wait w, capped at Max.
func (r Retry) jittered(w time.Duration) time.Duration {
	if r.Jitter > 0 {
		f := 1 + r.Jitter*(2*rand.Float64()-1)
		w = time.Duration(float64(w) * f)
	}
	return min(w, r.Max)
}
