package backoff

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestDelayDoublesUpToMax(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := b.Delay(i); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if got := b.Delay(1 << 30); got != time.Second {
		t.Errorf("Delay(huge) = %v, want the cap", got)
	}
}

func TestJitterStaysInItsBandAndUnderMax(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: 300 * time.Millisecond, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for range 200 {
		d := b.Delay(1)
		if d < 50*time.Millisecond || d > 150*time.Millisecond {
			t.Fatalf("Delay(1) = %v, outside [50ms, 150ms]", d)
		}
		seen[d] = true
		if d := b.Delay(5); d < 150*time.Millisecond || d > 300*time.Millisecond {
			t.Fatalf("Delay(5) = %v, outside [150ms, 300ms]", d)
		}
	}
	if len(seen) < 2 {
		t.Errorf("200 jittered waits all equal: %v", seen)
	}
}

func TestSleepEndsEarlyWhenDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(nil, time.Minute) || time.Since(start) != time.Minute {
			t.Errorf("Sleep(nil, 1m) did not wait the minute: %v", time.Since(start))
		}
		done := make(chan struct{})
		go func() { time.Sleep(time.Second); close(done) }()
		start = time.Now()
		if Sleep(done, time.Hour) || time.Since(start) != time.Second {
			t.Errorf("Sleep was not cut short at the close: %v", time.Since(start))
		}
	})
}
