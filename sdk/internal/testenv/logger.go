package testenv

import (
	"bytes"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// Logger returns a logger that writes to t.Log, and drops what is logged
// after the test (a plugin's last words) instead of panicking. The sdk's
// conformance harnesses (drivertest, storagetest) hand it out.
func Logger(t testing.TB) hclog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: w})
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
