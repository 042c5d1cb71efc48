package csi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi"
)

// instantClock never waits.
type instantClock struct{}

func (instantClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// recordingClock records the waits asked of it without waiting, and runs
// onSleep (if set) with the number of the wait.
type recordingClock struct {
	mu      sync.Mutex
	waits   []time.Duration
	onSleep func(n int)
}

func (c *recordingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	n := len(c.waits)
	c.mu.Unlock()
	if c.onSleep != nil {
		c.onSleep(n)
	}
	return ctx.Err()
}

func uncertainErr(n int) error {
	return &csi.Error{Call: csi.CallNodeStageVolume, VolumeID: "v1", Code: codes.Unavailable, Message: fmt.Sprint("try ", n)}
}

func TestRetryBackoffGrowsAndCaps(t *testing.T) {
	clock := &recordingClock{}
	r := csi.Retry{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2, Clock: clock, Logger: testLogger(t)}
	attempts := 0
	err := r.Do(context.Background(), csi.CallNodeStageVolume, "v1", func(context.Context) error {
		attempts++
		if attempts < 6 {
			return uncertainErr(attempts)
		}
		return nil
	})
	if err != nil || attempts != 6 {
		t.Fatalf("got %v after %d attempts, want success after 6", err, attempts)
	}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if fmt.Sprint(clock.waits) != fmt.Sprint(want) {
		t.Errorf("waits %v, want %v", clock.waits, want)
	}
}

func TestRetryJitterBounds(t *testing.T) {
	clock := &recordingClock{}
	r := csi.Retry{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5, MaxAttempts: 40, Clock: clock}
	err := r.Do(context.Background(), csi.CallProbe, "", func(context.Context) error { return uncertainErr(0) })
	if !csi.IsUncertain(err) || !strings.Contains(err.Error(), "gave up after 40 attempts") {
		t.Fatalf("got %v", err)
	}
	if len(clock.waits) != 39 {
		t.Fatalf("%d waits, want 39", len(clock.waits))
	}
	base := 100 * time.Millisecond
	distinct := map[time.Duration]bool{}
	for i, w := range clock.waits {
		lo, hi := base/2, min(base*3/2, time.Second)
		if w < lo || w > hi {
			t.Errorf("wait %d is %v, outside [%v, %v]", i, w, lo, hi)
		}
		distinct[w] = true
		base = min(base*2, time.Second)
	}
	if len(distinct) < 10 {
		t.Errorf("only %d distinct waits in 39: jitter is not random", len(distinct))
	}
}

func TestRetryStopsOnFinal(t *testing.T) {
	clock := &recordingClock{}
	final := &csi.Error{Call: csi.CallNodeStageVolume, VolumeID: "v1", Code: codes.InvalidArgument, Message: "bad fs"}
	attempts := 0
	err := csi.Retry{Clock: clock}.Do(context.Background(), csi.CallNodeStageVolume, "v1", func(context.Context) error {
		attempts++
		if attempts == 1 {
			return uncertainErr(1)
		}
		return final
	})
	if err != final || attempts != 2 || len(clock.waits) != 1 {
		t.Fatalf("got %v after %d attempts and %d waits; want the final error after 2 and 1", err, attempts, len(clock.waits))
	}
}

func TestRetryUntilContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := &recordingClock{onSleep: func(n int) {
		if n == 7 {
			cancel()
		}
	}}
	attempts := 0
	err := csi.Retry{Clock: clock}.Do(ctx, csi.CallNodeStageVolume, "v1", func(context.Context) error {
		attempts++
		return uncertainErr(attempts)
	})
	if attempts != 7 {
		t.Errorf("%d attempts, want 7", attempts)
	}
	var e *csi.Error
	if !errors.As(err, &e) || e.Message != "try 7" || !errors.Is(err, context.Canceled) || !csi.IsUncertain(err) {
		t.Fatalf("got %v; want the last attempt's uncertain error and context.Canceled", err)
	}
	// A context already done runs nothing.
	attempts = 0
	err = csi.Retry{Clock: clock}.Do(ctx, csi.CallProbe, "", func(context.Context) error { attempts++; return nil })
	if attempts != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("done context: %d attempts, %v", attempts, err)
	}
}

// TestRetryAgainstPlugin retries a real call: uncertain answers are retried,
// a final answer stops, and every attempt is logged with call, volume and
// attempt number.
func TestRetryAgainstPlugin(t *testing.T) {
	logs, logger := newCaptureLogger(t)
	p, _, c := startFake(t)
	ctx := testCtx(t)
	stage := func(ctx context.Context) error {
		_, err := c.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v9", StagingTargetPath: "/s", VolumeCapability: rwCap})
		return err
	}
	r := csi.Retry{Clock: &recordingClock{}, Logger: logger}

	p.NodeStageVolume.Next(nil, status.Error(codes.Unavailable, "busy"))
	p.NodeStageVolume.Next(nil, status.Error(codes.Aborted, "operation pending"))
	p.NodeStageVolume.Next(nil, status.Error(codes.ResourceExhausted, "too many"))
	if err := r.Do(ctx, csi.CallNodeStageVolume, "v9", stage); err != nil {
		t.Fatalf("retries did not reach success: %v", err)
	}
	if n := p.NodeStageVolume.Count(); n != 4 {
		t.Errorf("plugin saw %d attempts, want 4", n)
	}
	for _, want := range []string{
		"csi call failed, retrying: call=NodeStageVolume volume=v9 attempt=1 code=Unavailable",
		"attempt=2 code=Aborted", "attempt=3 code=ResourceExhausted",
		"csi call succeeded after retries: call=NodeStageVolume volume=v9 attempt=4",
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}

	p.NodeStageVolume.Next(nil, status.Error(codes.FailedPrecondition, "device busy"))
	err := r.Do(ctx, csi.CallNodeStageVolume, "v9", stage)
	if status.Code(err) != codes.FailedPrecondition || p.NodeStageVolume.Count() != 5 {
		t.Errorf("final error: got %v after %d calls", err, p.NodeStageVolume.Count())
	}
	if !strings.Contains(logs.String(), "not retrying: call=NodeStageVolume volume=v9 attempt=1 code=FailedPrecondition") {
		t.Error("final failure not logged")
	}
}

func TestRealClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := (csi.RealClock{}).Sleep(context.Background(), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Errorf("slept %v, want 5s", d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		if err := (csi.RealClock{}).Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("slept %v past a 1s context", d)
		}
	})
}

// TestRetryDefaultClock runs the default (real) clock inside a synctest
// bubble: a minute of backoff passes in no real time.
func TestRetryDefaultClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		attempts := 0
		err := csi.DefaultRetry().Do(ctx, csi.CallProbe, "", func(context.Context) error { attempts++; return uncertainErr(attempts) })
		if !errors.Is(err, context.DeadlineExceeded) || !csi.IsUncertain(err) {
			t.Fatalf("got %v", err)
		}
		// 250ms doubling with ±20% jitter, capped at 30s: 7 to 9 attempts fit a minute.
		if attempts < 6 || attempts > 10 {
			t.Errorf("%d attempts in a minute of default backoff", attempts)
		}
	})
}
