package durations

import (
	"math"
	"time"
)

// MaxMs is the largest duration, in milliseconds, a job or request may
// give: ten years (no timeout, delay or deadline is meant to be longer),
// far from where nanoseconds overflow (292 years).
const MaxMs = 10 * 365 * 24 * int64(time.Hour/time.Millisecond)

// Max is MaxMs as a duration.
const Max = time.Duration(MaxMs) * time.Millisecond

// FromMs is ms milliseconds as a duration, saturated at the largest and
// smallest durations.
func FromMs(ms int64) time.Duration {
	switch {
	case ms > math.MaxInt64/int64(time.Millisecond):
		return math.MaxInt64
	case ms < math.MinInt64/int64(time.Millisecond):
		return math.MinInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// AddMs is unix nanoseconds ns plus ms milliseconds, saturated.
func AddMs(ns, ms int64) int64 {
	return AddNanos(ns, int64(FromMs(ms)))
}

// AddNanos is ns plus d, saturated at the int64 range.
func AddNanos(ns, d int64) int64 {
	switch {
	case d > 0 && ns > math.MaxInt64-d:
		return math.MaxInt64
	case d < 0 && ns < math.MinInt64-d:
		return math.MinInt64
	}
	return ns + d
}
