package volumehooks

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// A teardown that finished with the state DB full lost
// its node-detached report (Queue failed to persist it and dropped it),
// and the claim stayed releasing. The report is sent all the same, and
// persisted once the disk has room, while it is still not delivered.
func TestAReportThatCannotBePersistedIsSentAllTheSame(t *testing.T) {
	e := newVolEnv(t, nil)
	claims, store, rep := e.claims, e.reports, e.rep
	claims.fail(nil, status.Error(codes.Unavailable, "no server"))
	store.full.Store(true)

	detached := claimReport(volNodeID, "a1", "", "v1")
	detached.State = pb.ClaimState_CLAIM_STATE_NODE_DETACHED
	rep.Queue(detached)
	if p := rep.Pending(); len(p) != 1 || p[0].GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
		t.Fatalf("pending %v, want a1's node-detached report", p)
	}
	if n := store.len(); n != 0 {
		t.Fatalf("%d reports persisted on a full disk", n)
	}

	store.full.Store(false)
	testutil.WaitFor(t, volWait, func() error {
		if n := store.len(); n != 1 {
			return fmt.Errorf("%d reports persisted once the disk has room, want 1 (not delivered yet)", n)
		}
		return nil
	})
	claims.fail(nil, nil)
	claims.waitUpdate(t, "a1", "v1", pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	testutil.WaitFor(t, volWait, func() error {
		if n := store.len(); n != 0 || len(rep.Pending()) != 0 {
			return fmt.Errorf("%d reports persisted, %d pending after delivery, want none", n, len(rep.Pending()))
		}
		return nil
	})
}

// Delivered without ever being persisted: nothing is left behind.
func TestAReportNotPersistedIsDelivered(t *testing.T) {
	e := newVolEnv(t, nil)
	claims, rep := e.claims, e.rep
	e.reports.full.Store(true)
	detached := claimReport(volNodeID, "a1", "", "v1")
	detached.State = pb.ClaimState_CLAIM_STATE_NODE_DETACHED
	rep.Queue(detached)
	claims.waitUpdate(t, "a1", "v1", pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	testutil.WaitFor(t, volWait, func() error {
		if len(rep.Pending()) != 0 {
			return fmt.Errorf("pending %v after delivery", rep.Pending())
		}
		return nil
	})
}

// A teardown that keeps failing (its node plugin gone, or unable to write
// its state on a full disk) is retried on a capped, jittered exponential
// backoff, each failure shown on the claim with the time of the next try,
// until it succeeds.
func TestTeardownRetriesOnAJitteredCappedBackoffShowingTheNextTry(t *testing.T) {
	// 0.8 of each wait: 80ms, 160ms, then 320ms (400ms capped, jittered)
	// for good.
	testTeardownBackoff(t, 0, []time.Duration{80 * time.Millisecond, 160 * time.Millisecond, 320 * time.Millisecond})
}

// The jitter is applied to the capped wait, so the tries at the cap are
// spread ±20% around it too, not only below it.
func TestTeardownBackoffJittersTheCappedWaitBothWays(t *testing.T) {
	// 1.1 of each wait: 110ms, 220ms, then 440ms (400ms capped, jittered).
	testTeardownBackoff(t, 0.75, []time.Duration{110 * time.Millisecond, 220 * time.Millisecond, 440 * time.Millisecond})
}

// testTeardownBackoff fails a teardown (retry 100ms doubling to 400ms)
// with the given jitter until the last of want (the capped wait) has been
// shown as a failure's next try, every one of them among want.
func testTeardownBackoff(t *testing.T, jitter float64, want []time.Duration) {
	t.Helper()
	e := newVolEnv(t, func(c *VolumeConfig) {
		c.TeardownAttempt = 10 * time.Millisecond
		c.TeardownWait = time.Millisecond
		c.TeardownRetry, c.TeardownRetryMax = 100*time.Millisecond, 400*time.Millisecond
		c.Jitter = func() float64 { return jitter }
	})
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	e.plugins.close()
	_ = e.postrun()
	capped := want[len(want)-1]
	testutil.WaitFor(t, volWait, func() error {
		var got []time.Duration
		for _, u := range e.claims.delivered() {
			if u.GetAllocId() != hookAlloc || u.GetError() == nil {
				continue
			}
			got = append(got, time.Duration(u.GetNextRetryAt()-u.GetError().GetFailedAt()))
		}
		seen := map[time.Duration]bool{}
		for _, d := range got {
			ok := false
			for _, w := range want {
				if d <= w && d > w-20*time.Millisecond {
					ok, seen[w] = true, true
				}
			}
			if !ok {
				return fmt.Errorf("a failure's next try %s after it, want one of %v", d, want)
			}
		}
		if !seen[capped] {
			return fmt.Errorf("next tries %v: the capped one (%s) not seen yet", got, capped)
		}
		return nil
	})
	e.plugins.reopen()
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
}

// delivered returns the updates the fake took.
func (f *fakeClaims) delivered() []*pb.ClientClaimUpdateRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.updates)
}
