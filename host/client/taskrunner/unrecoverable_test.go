package taskrunner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/pb"
)

// syncBuffer is a log sink the test reads while the runner writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A prestart hook's unrecoverable error (a plugin socket path too long
// for the node) fails the task at once, whatever its restart policy: no
// retry after the delay, a final "Not Restarting" naming the error, and
// an error line in the client's log with the alloc and the task. Before,
// the task waited out every restart delay (15s each by default) with
// nothing in the log.
func TestUnrecoverablePrestartFailureEndsTheTaskAtOnce(t *testing.T) {
	d := newFakeDriver()
	log := &hookLog{}
	cause := errors.New(`socket path "/long/csi.sock" is 140 bytes, more than the 107 a unix socket address holds`)
	logs := &syncBuffer{}
	tr := newRunner(t, d, []runhooks.Hook{&allHooks{log: log, prestartErr: runhooks.Unrecoverable(fmt.Errorf("plugin p: %w", cause))}}, func(c *Config) {
		// Retried for ever, an hour apart, were the error recoverable.
		c.Restart = &pb.RestartPolicy{Attempts: 1000, IntervalMs: 3_600_000, DelayMs: 3_600_000, Mode: pb.RestartMode_RESTART_MODE_DELAY}
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}).With("alloc_id", "a1")
	})
	go tr.Run()
	waitRunDone(t, tr)
	st := tr.State()
	if !st.GetFailed() || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || len(d.started()) != 0 {
		t.Fatalf("state %v, %d starts; want dead and failed, never started", st, len(d.started()))
	}
	if got := types(st); !slices.Equal(got, []string{"Task Setup", "Setup Failure", "Not Restarting"}) {
		t.Fatalf("events %v", got)
	}
	evs := st.GetEvents()
	setup, last := evs[1], evs[2]
	if !setup.GetFailed() || !strings.Contains(setup.GetMessage(), cause.Error()) {
		t.Fatalf("setup failure %v, want it naming %q", setup, cause)
	}
	if !last.GetFailed() || last.GetDetails()["reason"] != "unrecoverable" || !strings.Contains(last.GetMessage(), cause.Error()) {
		t.Fatalf("last event %v, want a final Not Restarting (reason unrecoverable) naming the error", last)
	}
	if got := log.get(); !slices.Equal(got, []string{"prestart recovered=false attempt=1"}) {
		t.Fatalf("hooks %v, want one prestart", got)
	}
	line := ""
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "task failed to start") {
			line = l
		}
	}
	for _, want := range []string{"[ERROR]", "alloc_id=a1", "task=web", "unrecoverable=true", "140 bytes"} {
		if !strings.Contains(line, want) {
			t.Fatalf("log line %q lacks %q; log:\n%s", line, want, logs.String())
		}
	}
}

// A recoverable prestart failure is logged too, and the restart policy
// still decides.
func TestRecoverablePrestartFailureIsLoggedAndRestarted(t *testing.T) {
	d := newFakeDriver()
	log := &hookLog{}
	logs := &syncBuffer{}
	h := &allHooks{log: log, prestartErr: errors.New("volume not ready")}
	tr := newRunner(t, d, []runhooks.Hook{h}, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 1, IntervalMs: 60_000, DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_FAIL}
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}).With("alloc_id", "a1")
	})
	go tr.Run()
	waitRunDone(t, tr)
	if got := types(tr.State()); !slices.Equal(got, []string{"Task Setup", "Setup Failure", "Restarting", "Setup Failure", "Not Restarting"}) {
		t.Fatalf("events %v", got)
	}
	if n := strings.Count(logs.String(), "task failed to start"); n != 2 || !strings.Contains(logs.String(), "unrecoverable=false") {
		t.Fatalf("%d log lines of the failed starts, want 2 (recoverable); log:\n%s", n, logs.String())
	}
	tr.Destroy(context.Background())
}
