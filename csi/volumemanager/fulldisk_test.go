package volumemanager

import (
	"context"
	"errors"
	"strings"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// The usage record is write-ahead for a publish: one whose record cannot
// be written (a full disk) fails before any call, naming the volume and
// the error. A teardown writes nothing before its calls (the publish
// path's removal marks it begun), so a full disk does not keep a volume
// published: it unpublishes and unstages, and fails at removing the
// record, which a restart reads as a teardown under way. Once the disk
// has room, the same calls go through.
func TestFullDiskStopsPublishNotTeardown(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	ctx := context.Background()
	errFull := errors.New("write state.db: no space left on device")

	h.store.setFull(errFull)
	_, err := m.Publish(ctx, request("v1", "a1"))
	if !errors.Is(err, errFull) || !strings.Contains(err.Error(), `"v1"`) {
		t.Fatalf("publish on a full disk: %v, want the write error naming v1", err)
	}
	if s, p := h.plugin.NodeStageVolume.Count(), h.plugin.NodePublishVolume.Count(); s != 0 || p != 0 {
		t.Fatalf("%d stage, %d publish calls for a use that could not be recorded, want none", s, p)
	}
	if _, ok := m.Usage("v1"); ok {
		t.Fatal("the manager holds a usage it could not record")
	}

	h.store.setFull(nil)
	if _, err := m.Publish(ctx, request("v1", "a1")); err != nil {
		t.Fatal(err)
	}
	h.store.setFull(errFull)
	err = m.Unpublish(ctx, "a1", "v1", nil)
	if !errors.Is(err, errFull) {
		t.Fatalf("unpublish on a full disk: %v, want the write error", err)
	}
	if n, s := h.plugin.NodeUnpublishVolume.Count(), h.plugin.NodeUnstageVolume.Count(); n != 1 || s != 1 {
		t.Fatalf("%d unpublish, %d unstage calls on a full disk, want 1, 1 (no write needed before them)", n, s)
	}
	if rec := h.store.get("v1"); len(rec.GetUses()) != 1 || rec.GetUses()[0].GetState() != pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED {
		t.Fatalf("record after the teardown that could not remove it: %v, want a1's use saved published", rec)
	}
	// What a restart now would read: the use's path is gone.
	if u := h.manager(t).Uses(); len(u) != 1 || u[0].State != pb.VolumeUseState_VOLUME_USE_STATE_UNPUBLISHING {
		t.Fatalf("uses a restart reads: %+v, want a1's UNPUBLISHING", u)
	}

	h.store.setFull(nil)
	if err := m.Unpublish(ctx, "a1", "v1", nil); err != nil {
		t.Fatal(err)
	}
	if n, s := h.plugin.NodeUnpublishVolume.Count(), h.plugin.NodeUnstageVolume.Count(); n != 1 || s != 2 {
		t.Fatalf("%d unpublish, %d unstage calls once the disk has room, want 1, 2 (the unstage again, idempotent)", n, s)
	}
	if rec := h.store.get("v1"); rec != nil {
		t.Fatalf("record after the teardown: %v, want none", rec)
	}
}
