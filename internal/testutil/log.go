package testutil

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Logger returns a logger writing to t.Log, so logs appear only for failing
// (or -v) tests.
func Logger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   t.Name(),
		Level:  hclog.Debug,
		Output: &tWriter{t: t},
	})
}

type tWriter struct{ t testing.TB }

func (w *tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	// Logging after the test ended panics in testing; background goroutines
	// of a stopping server can still log, so guard it.
	defer func() { _ = recover() }()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// WaitFor polls cond every 20ms until it returns nil or timeout passes, then
// fails the test with cond's last error.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
