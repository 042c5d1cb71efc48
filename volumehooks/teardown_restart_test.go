package volumehooks

import (
	"errors"
	"os"
	"testing"
	"time"

	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// A client killed while its teardown is in NodeUnpublishVolume (nothing
// saved since the publish: the removed publish path marks the teardown)
// finds the use under way after its restart: a recovered prerun does not
// take it for published, and the sweep unpublishes again, unstages,
// reports node-detached and removes the record.
func TestTeardownKilledInUnpublishResumesAfterRestart(t *testing.T) {
	e := newVolEnv(t, func(c *VolumeConfig) { c.TeardownWait = time.Millisecond })
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	release := e.plugin.NodeUnpublishVolume.Block()
	_ = e.postrun() // the teardown goes on in the background
	testutil.WaitFor(t, volWait, func() error {
		if e.plugin.NodeUnpublishVolume.Count() == 0 {
			return errors.New("no unpublish call yet")
		}
		return nil
	})
	if rec := savedUsage(e.usage); len(rec.GetUses()) != 1 || rec.GetUses()[0].GetState() != pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED {
		t.Fatalf("saved usage during the unpublish: %v, want the use as saved at its publish", rec)
	}
	if _, err := os.Lstat(volumemanager.PublishPath(e.dir, hookAlloc, volID)); !os.IsNotExist(err) {
		t.Fatalf("publish path during the unpublish: %v, want it gone", err)
	}
	e.restart() // the killed client's teardown never returns
	release()

	if e.hooks.published(hookAlloc, volID) {
		t.Fatal("after the restart the use reads as published")
	}
	e.hooks.Sweep(func(string) bool { return false })
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	testutil.WaitFor(t, volWait, func() error {
		if savedUsage(e.usage) != nil {
			return errors.New("usage record still there")
		}
		return nil
	})
	if u, s := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); u != 2 || s != 1 {
		t.Errorf("unpublish %d, unstage %d; want 2 (the killed one, then again) and 1", u, s)
	}
}

// savedUsage is the record of volID the store holds, nil if none.
func savedUsage(s *memUsage) *pb.VolumeUsageRecord {
	recs, _ := s.VolumeUsages()
	for _, r := range recs {
		if r.GetVolumeId() == volID {
			return r
		}
	}
	return nil
}
