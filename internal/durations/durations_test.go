package durations

import (
	"math"
	"testing"
	"time"
)

// Conversions saturate instead of wrapping: a deadline of 2^63-1 ms from
// now is the far future, not a time in the past.
func TestConversionsSaturate(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"FromMs(max)", int64(FromMs(math.MaxInt64)), math.MaxInt64},
		{"FromMs(min)", int64(FromMs(math.MinInt64)), math.MinInt64},
		{"FromMs(1500)", int64(FromMs(1500)), int64(1500 * time.Millisecond)},
		{"AddMs(now, max)", AddMs(now, math.MaxInt64), math.MaxInt64},
		{"AddMs(now, MaxMs)", AddMs(now, MaxMs), now + int64(Max)},
		{"AddMs(now, min)", AddMs(now, math.MinInt64), math.MinInt64 + now},
		{"AddNanos(max, 1)", AddNanos(math.MaxInt64, 1), math.MaxInt64},
		{"AddNanos(min, -1)", AddNanos(math.MinInt64, -1), math.MinInt64},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}
