package volumemanager

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
)

func expandCall(bytes int64) *csipb.NodeExpandVolumeRequest {
	return &csipb.NodeExpandVolumeRequest{VolumeId: "ignored", CapacityRange: &csipb.CapacityRange{RequiredBytes: bytes},
		Secrets: map[string]string{"key": "s3cret"}}
}

// Expand reaches the plugin with the provider's volume ID, the first
// published use's target as volume_path, the staging path, and the
// servers' capacity range and secrets; a volume the node only stages is
// expanded at its staging path.
func TestExpandGivesThePluginTheNodesPaths(t *testing.T) {
	h := newHarness(t)
	h.plugins.expand = true
	m := h.manager(t)
	ctx := context.Background()
	for _, user := range []string{"a2", "a1"} {
		if _, err := m.Publish(ctx, request("v1", user)); err != nil {
			t.Fatal(err)
		}
	}
	h.plugin.NodeExpandVolume.Next(&csipb.NodeExpandVolumeResponse{CapacityBytes: 8 << 20}, nil)
	res, err := m.Expand(ctx, "v1", "hostpath", expandCall(8<<20))
	if err != nil {
		t.Fatal(err)
	}
	staging := filepath.Join(h.dir, "csi", "volumes", "hostpath", "staging", "v1")
	target := filepath.Join(h.dir, "csi", "volumes", "hostpath", "publish", "a1", "v1")
	got := h.plugin.NodeExpandVolume.Last()
	if got.GetVolumeId() != "ext-v1" || got.GetVolumePath() != target || got.GetStagingTargetPath() != staging ||
		got.GetCapacityRange().GetRequiredBytes() != 8<<20 || got.GetSecrets()["key"] != "s3cret" {
		t.Fatalf("NodeExpandVolume got %v", got)
	}
	if res.CapacityBytes != 8<<20 || res.VolumePath != target {
		t.Fatalf("Expand answered %+v", res)
	}

	// Staged only (its users gone but one, itself mid-teardown): the
	// staging path is the volume's path on the node.
	rec := h.store.get("v1")
	for _, u := range rec.GetUses() {
		u.State = 0
	}
	h2 := *h
	h2.store = newMemStore()
	if err := h2.store.PutVolumeUsage(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := h2.manager(t).Expand(ctx, "v1", "hostpath", expandCall(9<<20)); err != nil {
		t.Fatal(err)
	}
	if got := h.plugin.NodeExpandVolume.Last(); got.GetVolumePath() != staging || got.GetStagingTargetPath() != staging {
		t.Fatalf("staged-only NodeExpandVolume got %v", got)
	}
}

// A volume the node does not hold, or holds through another plugin, is
// ErrNotHeld without a call; a plugin without EXPAND_VOLUME is
// ErrNoNodeExpand; the plugin's own error keeps its code and the message
// names volume, node and path.
func TestExpandRefusals(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	ctx := context.Background()
	if _, err := m.Expand(ctx, "v1", "hostpath", expandCall(1)); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("expand of a volume not held: %v", err)
	}
	if _, err := m.Publish(ctx, request("v1", "a1")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Expand(ctx, "v1", "other", expandCall(1)); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("expand through another plugin: %v", err)
	}
	if _, err := m.Expand(ctx, "v1", "hostpath", expandCall(1)); !errors.Is(err, ErrNoNodeExpand) {
		t.Fatalf("expand without EXPAND_VOLUME: %v", err)
	}
	if n := h.plugin.NodeExpandVolume.Count(); n != 0 {
		t.Fatalf("%d NodeExpandVolume calls on refusals", n)
	}
	h.plugins.expand = true
	h.plugin.NodeExpandVolume.Next(nil, status.Error(codes.OutOfRange, "no room"))
	_, err := m.Expand(ctx, "v1", "hostpath", expandCall(1))
	if errcode.Code(err) != codes.OutOfRange || !containsAll(err.Error(), `volume "v1"`, nodeID, "no room", "publish/a1/v1") {
		t.Fatalf("plugin error: %v (%s)", err, errcode.Code(err))
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
