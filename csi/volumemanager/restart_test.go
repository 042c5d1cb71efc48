package volumemanager

import (
	"context"
	"errors"
	"os"
	"testing"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// interrupted runs f with a context that is cancelled once the call f
// makes is under way (counted by count), as a client dies in the middle
// of it, and returns f's error.
func interrupted(t *testing.T, count func() int, f func(context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := count()
	errc := make(chan error, 1)
	go func() { errc <- f(ctx) }()
	testutil.WaitFor(t, waitLimit, func() error {
		if count() == before && len(errc) == 0 {
			return errors.New("the call has not started")
		}
		return nil
	})
	cancel()
	return <-errc
}

// A published use survives a client restart: publishing it again makes no
// call, and another user's teardown does not unstage it.
func TestRestartKeepsPublishedAndStaged(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	ctx := context.Background()
	for _, a := range []string{"a1", "a2"} {
		if _, err := m.Publish(ctx, request("v1", a)); err != nil {
			t.Fatal(err)
		}
	}
	// a1's teardown dies in NodeUnpublishVolume.
	release := h.plugin.NodeUnpublishVolume.Block()
	err := interrupted(t, h.plugin.NodeUnpublishVolume.Count, func(ctx context.Context) error { return m.Unpublish(ctx, "a1", "v1", nil) })
	release()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted unpublish: %v", err)
	}
	// Restart.
	m = h.manager(t)
	path, err := m.Publish(ctx, request("v1", "a2"))
	if err != nil {
		t.Fatal(err)
	}
	if n := h.plugin.NodePublishVolume.Count(); n != 2 {
		t.Fatalf("a2 published again after the restart (%d publish calls)", n)
	}
	if path == "" {
		t.Fatal("no path for the published use")
	}
	if _, err := m.Publish(ctx, request("v1", "a1")); !errors.Is(err, ErrTearingDown) {
		t.Errorf("publishing a use whose teardown started: %v, want ErrTearingDown", err)
	}
	// The sweep finishes a1's teardown (its alloc is gone) and keeps a2's.
	if err := m.Sweep(ctx, func(u Use) bool { return u.User == "a2" }); err != nil {
		t.Fatal(err)
	}
	if n := h.plugin.NodeUnpublishVolume.Count(); n != 2 {
		t.Errorf("%d unpublish calls, want 2 (the interrupted one, then its finish)", n)
	}
	if n := h.plugin.NodeUnstageVolume.Count(); n != 0 {
		t.Fatalf("unstaged while a2 uses the volume (%d calls)", n)
	}
	if u := m.Uses(); len(u) != 1 || u[0].User != "a2" {
		t.Fatalf("uses %+v, want a2's", u)
	}
}

// A client that dies between the last unpublish and the unstage (or in
// the unstage) unstages after its restart, and a use that died in
// NodePublishVolume is published again.
func TestRestartFinishesTeardown(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	ctx := context.Background()
	if _, err := m.Publish(ctx, request("v1", "a1")); err != nil {
		t.Fatal(err)
	}
	release := h.plugin.NodeUnstageVolume.Block()
	err := interrupted(t, h.plugin.NodeUnstageVolume.Count, func(ctx context.Context) error { return m.Unpublish(ctx, "a1", "v1", nil) })
	release()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted unstage: %v", err)
	}
	// Nothing was saved since the publish: the record still says a1
	// published, and the missing publish path says its teardown began.
	if rec := h.store.get("v1"); len(rec.GetUses()) != 1 || rec.GetUses()[0].GetState() != pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED {
		t.Fatalf("record after the interrupted unstage: %v, want a1's use as saved at its publish", rec)
	}
	m = h.manager(t)
	if u := m.Uses(); len(u) != 1 || u[0].State != pb.VolumeUseState_VOLUME_USE_STATE_UNPUBLISHING {
		t.Fatalf("uses after the restart: %+v, want a1's UNPUBLISHING", u)
	}
	if _, err := m.Publish(ctx, request("v1", "a1")); !errors.Is(err, ErrTearingDown) {
		t.Fatalf("publishing a use whose teardown started: %v, want ErrTearingDown", err)
	}
	// The alloc is gone: the sweep finishes its teardown.
	if err := m.Sweep(ctx, func(Use) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if n, s := h.plugin.NodeUnpublishVolume.Count(), h.plugin.NodeUnstageVolume.Count(); n != 2 || s != 2 || h.store.get("v1") != nil {
		t.Fatalf("after the restart: %d unpublish, %d unstage calls (want 2, 2), record %v", n, s, h.store.get("v1"))
	}

	// Dies in NodePublishVolume: the next Publish calls it again.
	release = h.plugin.NodePublishVolume.Block()
	err = interrupted(t, h.plugin.NodePublishVolume.Count, func(ctx context.Context) error {
		_, err := m.Publish(ctx, request("v2", "a2"))
		return err
	})
	release()
	if err == nil {
		t.Fatal("interrupted publish succeeded")
	}
	m = h.manager(t)
	before := h.plugin.NodePublishVolume.Count()
	if _, err := m.Publish(ctx, request("v2", "a2")); err != nil {
		t.Fatal(err)
	}
	if n := h.plugin.NodePublishVolume.Count(); n != before+1 {
		t.Errorf("publishing use published again: %d calls, want %d", n, before+1)
	}
	if n := h.plugin.NodeStageVolume.Count(); n != 2 {
		t.Errorf("%d stage calls, want 2 (v1 once, v2 once: staged before the publish died)", n)
	}
}

// A teardown saves nothing before its calls, and the last user's nothing
// between its unpublish and its unstage: while NodeUnstageVolume runs, the
// state DB still holds the use as saved at its publish (the missing
// publish path says its teardown began), and the record is removed after
// the unstage, one write for the whole teardown. A teardown that leaves a
// user saves once, after its unpublish: the use gone, the volume still
// STAGED.
func TestTeardownWritesOnlyAfterItsCalls(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	ctx := context.Background()
	for _, a := range []string{"a1", "a2"} {
		if _, err := m.Publish(ctx, request("v1", a)); err != nil {
			t.Fatal(err)
		}
	}
	puts := func() int {
		h.store.mu.Lock()
		defer h.store.mu.Unlock()
		return h.store.puts
	}
	before := puts()
	if err := m.Unpublish(ctx, "a1", "v1", nil); err != nil {
		t.Fatal(err)
	}
	if rec := h.store.get("v1"); len(rec.GetUses()) != 1 || rec.GetStageState() != pb.VolumeStageState_VOLUME_STAGE_STATE_STAGED {
		t.Fatalf("record with a2 left: %v, want a2's use and the volume staged", rec)
	}
	if n := puts() - before; n != 1 {
		t.Errorf("%d records written by a teardown leaving a user, want 1", n)
	}
	release := h.plugin.NodeUnstageVolume.Block()
	done := make(chan error, 1)
	before = puts()
	go func() { done <- m.Unpublish(ctx, "a2", "v1", nil) }()
	testutil.WaitFor(t, waitLimit, func() error {
		if h.plugin.NodeUnstageVolume.Count() == 0 {
			return errors.New("no unstage call yet")
		}
		return nil
	})
	rec := h.store.get("v1")
	written := puts() - before
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(rec.GetUses()) != 1 || rec.GetUses()[0].GetUser() != "a2" || rec.GetUses()[0].GetState() != pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED {
		t.Errorf("record during the unstage: %v, want a2's use as saved at its publish", rec)
	}
	if written != 0 {
		t.Errorf("%d records written before the unstage, want 0", written)
	}
	if _, err := os.Lstat(PublishPath(h.dir, "a2", "v1")); !os.IsNotExist(err) {
		t.Errorf("a2's publish path during the unstage: %v, want it gone (the teardown's mark)", err)
	}
	if h.store.get("v1") != nil {
		t.Errorf("record left after the unstage: %v", h.store.get("v1"))
	}
}
