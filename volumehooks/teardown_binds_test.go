package volumehooks

import (
	"sync/atomic"
	"testing"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/executor"
)

// countMountReads counts the reads of the mount table until the test ends.
func countMountReads(t *testing.T) *atomic.Int32 {
	var n atomic.Int32
	mountPoints = func() ([]string, error) {
		n.Add(1)
		return executor.MountPoints()
	}
	t.Cleanup(func() { mountPoints = executor.MountPoints })
	return &n
}

// A job stop's teardown reads the mount table for the tasks' read-only
// binds once (its try does, before the unpublish), not once more in
// Postrun before the teardown starts.
func TestPostrunReadsTheMountTableOnce(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	reads := countMountReads(t)
	if err := e.postrun(); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("the teardown read the mount table %d times, want 1", n)
	}
}
