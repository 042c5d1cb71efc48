package volumemanager

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// setSyncDir makes f the directory fsync for the test.
func setSyncDir(t *testing.T, f func(string) error) {
	old := syncDir
	syncDir = f
	t.Cleanup(func() { syncDir = old })
}

// The publish path's symlink is made durable (its directory fsynced, and
// the directory made for it in its parent) before the use is saved
// PUBLISHED: the record never says published for a link a power loss
// could take back.
func TestPublishPathSyncedBeforeItsRecord(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	var mu sync.Mutex
	var synced []string
	setSyncDir(t, func(dir string) error {
		mu.Lock()
		defer mu.Unlock()
		if rec := h.store.get("v1"); rec != nil {
			for _, u := range rec.GetUses() {
				if u.GetState() == pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED {
					t.Errorf("%s fsynced after the use was saved PUBLISHED", dir)
				}
			}
		}
		synced = append(synced, dir)
		return nil
	})
	path, err := m.Publish(context.Background(), request("v1", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	userDir := filepath.Dir(PublishPath(h.dir, "a1", "v1"))
	for _, want := range []string{userDir, filepath.Dir(userDir)} {
		if !slices.Contains(synced, want) {
			t.Errorf("%s not fsynced (fsynced: %q)", want, synced)
		}
	}
	if path == "" {
		t.Error("no publish path")
	}
}

// A publish path that cannot be made durable fails the publish before
// the record says PUBLISHED.
func TestPublishPathNotDurableIsNotPublished(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	broken := errors.New("fsync: input/output error")
	setSyncDir(t, func(string) error { return broken })
	if _, err := m.Publish(context.Background(), request("v1", "a1")); !errors.Is(err, broken) {
		t.Fatalf("publish: %v, want the fsync's error", err)
	}
	if rec := h.store.get("v1"); rec != nil {
		for _, u := range rec.GetUses() {
			if u.GetState() == pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED {
				t.Errorf("use %s saved PUBLISHED with its publish path not durable", u.GetUser())
			}
		}
	}
}
