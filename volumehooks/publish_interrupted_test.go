package volumehooks

import (
	"context"
	"fmt"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// An operator's claim released while its publish waits (here
// for the node plugin, which RunOperatorClaims and Publish each wait for
// up to PluginWait) is torn down at once — nothing is recorded yet, so the
// teardown reports node-detached and the servers free the claim — and the
// publish then goes on for a claim that no longer exists. The follower
// sweeps unlisted uses only when a newer list arrives, so the volume stays
// published on the node while the servers hand it to someone else.
func TestOperatorClaimReleasedDuringItsPublishIsNotLeftPublished(t *testing.T) {
	e := newVolEnv(t, nil)
	e.plugins.close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.hooks.RunOperatorClaims(ctx, e.claims)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_READY)
	// The publisher asked for the claim and now waits for the plugin.
	testutil.WaitFor(t, volWait, func() error {
		if e.claims.callCount() == 0 {
			return fmt.Errorf("no ClientClaim yet")
		}
		return nil
	})
	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_RELEASING)
	e.claims.waitUpdate(t, "c1", volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_FREED)
	time.Sleep(50 * time.Millisecond) // the follower has seen the freed list
	e.plugins.reopen()

	// The waiting publisher goes on (a fix may instead have it ask for
	// the claim again and stop, or have the release stop it).
	testutil.WaitFor(t, volWait, func() error {
		if e.plugin.NodePublishVolume.Count() == 0 && e.claims.callCount() < 2 && len(e.hooks.publishesUnderWay()) > 0 {
			return fmt.Errorf("publisher still waiting")
		}
		return nil
	})
	testutil.WaitFor(t, 3*time.Second, func() error {
		if uses := e.hooks.cfg.Volumes.Uses(); len(uses) != 0 {
			return fmt.Errorf("claim c1 was released and freed, yet the node holds %+v (publishes %d, unpublishes %d)",
				uses, e.plugin.NodePublishVolume.Count(), e.plugin.NodeUnpublishVolume.Count())
		}
		return nil
	})
}

// The in-use report is queued after Publish has saved the use
// PUBLISHED. A client that dies between the two restarts with the use
// published and no report queued; RunOperatorClaims then skips the claim
// (published already), so the servers never hear in-use and `berth volume
// claim` waits until its -timeout. (Allocs: the recovered prerun skips the
// volume the same way.)
func TestPublishedUseWithoutItsInUseReportIsReportedAfterARestart(t *testing.T) {
	e := newVolEnv(t, nil)
	// What the dead client left: the use published, its report not queued.
	e.savePublished("c1", true)
	e.restart()
	// The claim is on the servers before the restarted client first lists
	// its operator claims (as it was before it died): a follower that
	// listed before the claim existed would rightly tear the use down.
	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_READY)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.hooks.RunOperatorClaims(ctx, e.claims)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	e.claims.waitUpdate(t, "c1", volID, pb.ClaimState_CLAIM_STATE_IN_USE, false)
}
