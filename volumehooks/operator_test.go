package volumehooks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// An operator's claim on the node is published at
// <data_dir>/csi/publish/<claim>/<volume> (read-only for a read claim) and
// reported in-use; released, it is unpublished, unstaged and reported
// node-detached. A claim the servers drop while published (force-released)
// is torn down too.
func TestOperatorClaimsArePublishedAndTornDown(t *testing.T) {
	e := newVolEnv(t, nil)
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
	e.claims.waitUpdate(t, "c1", volID, pb.ClaimState_CLAIM_STATE_IN_USE, false)
	path := filepath.Join(e.dir, "csi", "publish", "c1", volID)
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the operator's claim's publish path: %v", err)
	}
	if got := e.plugin.NodePublishVolume.Last().GetTargetPath(); got != filepath.Join(e.dir, "csi", "volumes", "hostpath", "publish", "c1", volID) {
		t.Errorf("publish target %q", got)
	}

	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_RELEASING)
	e.claims.waitUpdate(t, "c1", volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	if u, s := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); u != 1 || s != 1 {
		t.Fatalf("after release: unpublish %d, unstage %d; want 1, 1", u, s)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("publish path left: %v", err)
	}
	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_FREED)

	// Published, then gone from the servers' list: torn down.
	e.claims.setOperator("c2", pb.ClaimState_CLAIM_STATE_READY)
	e.claims.waitUpdate(t, "c2", volID, pb.ClaimState_CLAIM_STATE_IN_USE, false)
	e.claims.setOperator("c2", pb.ClaimState_CLAIM_STATE_FREED)
	testutil.WaitFor(t, volWait, func() error {
		if u, s := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); u != 2 || s != 2 {
			return fmt.Errorf("unpublish %d, unstage %d; want 2, 2", u, s)
		}
		if uses := e.hooks.cfg.Volumes.Uses(); len(uses) != 0 {
			return fmt.Errorf("uses left: %+v", uses)
		}
		return nil
	})
	if n := e.plugin.NodePublishVolume.Count(); n != 2 {
		t.Errorf("%d publish calls, want 2 (c1, c2)", n)
	}
}

// An operator's claim freed while its publish waits for the node plugin,
// with no releasing state seen in between (the servers forced it off), is
// gone from the next list: that list stops the publish, which never
// reaches the plugin, and the claim is reported node-detached.
func TestOperatorClaimFreedDuringItsPublishStopsThePublish(t *testing.T) {
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
	testutil.WaitFor(t, volWait, func() error {
		if len(e.hooks.publishesUnderWay()) == 0 || e.claims.callCount() == 0 {
			return fmt.Errorf("publish of c1 not waiting for its plugin yet")
		}
		return nil
	})
	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_FREED)
	e.claims.waitUpdate(t, "c1", volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	if p := e.hooks.publishesUnderWay(); len(p) != 0 {
		t.Fatalf("publishes under way after the teardown: %v", p)
	}
	// Nothing is left that could publish once the plugin is back.
	e.plugins.reopen()
	if n := e.plugin.NodePublishVolume.Count(); n != 0 {
		t.Errorf("%d publish calls for a freed claim, want 0", n)
	}
	if uses := e.hooks.cfg.Volumes.Uses(); len(uses) != 0 {
		t.Errorf("uses of a freed claim: %+v", uses)
	}
}

// countUpdates counts the delivered updates of user's claim to state.
func (f *fakeClaims) countUpdates(user string, state pb.ClaimState) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, u := range f.updates {
		if (u.GetAllocId() == user || u.GetClaimId() == user) && u.GetState() == state {
			n++
		}
	}
	return n
}

// An operator's claim released and torn down stays listed, node-detached,
// until the leader's controller unpublish frees it. Newer lists meanwhile
// (another claim of the node changing) do not tear it down again: one
// unpublish, one node-detached report — nor does the list a restarted
// client gets first.
func TestOperatorClaimNodeDetachedIsTornDownOnce(t *testing.T) {
	e := newVolEnv(t, nil)
	run := func() {
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
	}
	run()
	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_READY)
	e.claims.waitUpdate(t, "c1", volID, pb.ClaimState_CLAIM_STATE_IN_USE, false)
	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_RELEASING)
	e.claims.waitUpdate(t, "c1", volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_NODE_DETACHED)

	// Newer lists: c2 comes, is published, goes releasing and is torn
	// down — each a change of the node's claims.
	e.claims.setOperator("c2", pb.ClaimState_CLAIM_STATE_READY)
	e.claims.waitUpdate(t, "c2", volID, pb.ClaimState_CLAIM_STATE_IN_USE, false)
	e.claims.setOperator("c2", pb.ClaimState_CLAIM_STATE_RELEASING)
	e.claims.waitUpdate(t, "c2", volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	e.claims.setOperator("c2", pb.ClaimState_CLAIM_STATE_NODE_DETACHED)
	e.claims.setOperator("c3", pb.ClaimState_CLAIM_STATE_RELEASING) // never published here
	e.claims.waitUpdate(t, "c3", volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	e.claims.setOperator("c3", pb.ClaimState_CLAIM_STATE_NODE_DETACHED)
	// A last change after every teardown ended: the list that follows is
	// acted on with all three node-detached.
	e.claims.setOperator("c4", pb.ClaimState_CLAIM_STATE_RESERVED)
	e.claims.waitListed(t)
	check := func(when string) {
		t.Helper()
		for _, c := range []string{"c1", "c2", "c3"} {
			if n := e.claims.countUpdates(c, pb.ClaimState_CLAIM_STATE_NODE_DETACHED); n != 1 {
				t.Errorf("%s: %d node-detached reports of %s, want 1", when, n, c)
			}
		}
		if n := e.plugin.NodeUnpublishVolume.Count(); n != 2 {
			t.Errorf("%s: %d unpublish calls, want 2 (c1 and c2, once each)", when, n)
		}
	}
	check("after newer lists")

	// A client restart: the first list has the three node-detached claims;
	// the node holds nothing of them, so nothing is done.
	e.restart()
	run()
	e.claims.setOperator("c5", pb.ClaimState_CLAIM_STATE_RESERVED)
	e.claims.waitListed(t)
	check("after a client restart")
}
