package executor

import (
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Threads that go idle at once (two standbys spawned together) share no
// scheduling value: unix.SchedSetAttr writes into the one it is given, so
// a shared one is a data race (the race detector fails this test on it),
// and each thread comes back to the scheduling it had.
func TestThreadsGoIdleAndReturnAtOnce(t *testing.T) {
	var wg sync.WaitGroup
	results := make([]bool, 4)
	for i := range results {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cur, err := unix.SchedGetAttr(0, 0)
			if err != nil {
				t.Errorf("sched_getattr: %v", err)
				return
			}
			back, ok := returnable(cur)
			if !ok {
				t.Errorf("this thread's scheduling %+v is not one a standby carries", cur)
				return
			}
			results[i] = canReturn(&back)
			after, err := unix.SchedGetAttr(0, 0)
			if err != nil {
				t.Errorf("sched_getattr: %v", err)
				return
			}
			if !sameSched(after, &back) {
				t.Errorf("thread %d at %+v after its return, want %+v", i, after, back)
			}
		})
	}
	wg.Wait()
	for i, ok := range results {
		if !ok {
			t.Errorf("thread %d could not go idle and return", i)
		}
	}
}
