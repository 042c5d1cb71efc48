package cli

import (
	"os"
	"syscall"
	"testing"
	"testing/synctest"
)

type countingReloader struct{ n int }

func (r *countingReloader) ReloadTLS() error { r.n++; return nil }

// TestSIGHUPReloads: every SIGHUP reloads, and the agent keeps running
// through them until the shutdown signal.
func TestSIGHUPReloads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		signals, hup := make(chan os.Signal, 1), make(chan os.Signal, 2)
		r := &countingReloader{}
		done := make(chan os.Signal, 1)
		go func() { done <- waitSignal(r, signals, hup) }()
		hup <- syscall.SIGHUP
		hup <- syscall.SIGHUP
		synctest.Wait()
		if r.n != 2 || len(done) != 0 {
			t.Fatalf("after two SIGHUPs: %d reloads, returned %v; want 2 and still waiting", r.n, len(done) != 0)
		}
		signals <- syscall.SIGTERM
		if sig := <-done; sig != syscall.SIGTERM {
			t.Fatalf("waitSignal returned %v", sig)
		}
	})
}
