package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// Two allocs of one volume on one node: one NodeStageVolume, one
// NodePublishVolume each at its own target, and NodeUnstageVolume only
// when the last one is unpublished.
func TestStageOnceUnstageAfterLastUser(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	ctx := context.Background()
	req := request("v1", "a1")
	req.ReadOnly = true
	req.MountOptions = &pb.MountOptions{MountFlags: []string{"ro", "nodev"}}
	p1, err := m.Publish(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := m.Publish(ctx, request("v1", "a2"))
	if err != nil {
		t.Fatal(err)
	}
	if n := h.plugin.NodeStageVolume.Count(); n != 1 {
		t.Fatalf("%d stage calls for two allocs, want 1", n)
	}
	if n := h.plugin.NodePublishVolume.Count(); n != 2 {
		t.Fatalf("%d publish calls, want 2", n)
	}
	stage := h.plugin.NodeStageVolume.Last()
	staging := filepath.Join(h.dir, "csi", "volumes", "hostpath", "staging", "v1")
	if stage.GetVolumeId() != "ext-v1" || stage.GetStagingTargetPath() != staging || stage.GetPublishContext()["device"] != "/dev/fake" ||
		stage.GetSecrets()["key"] != "s3cret" || stage.GetVolumeContext()["ctx"] != "1" ||
		stage.GetVolumeCapability().GetMount().GetFsType() != "ext4" {
		t.Errorf("stage request %v", stage)
	}
	if fi, err := os.Stat(staging); err != nil || !fi.IsDir() {
		t.Errorf("staging dir not made by the CO: %v", err)
	}
	pubs := h.plugin.NodePublishVolume.Requests()
	target1 := filepath.Join(h.dir, "csi", "volumes", "hostpath", "publish", "a1", "v1")
	if pubs[0].GetTargetPath() != target1 || !pubs[0].GetReadonly() || pubs[0].GetStagingTargetPath() != staging ||
		strings.Join(pubs[0].GetVolumeCapability().GetMount().GetMountFlags(), ",") != "ro,nodev" ||
		pubs[0].GetVolumeCapability().GetMount().GetFsType() != "ext4" {
		t.Errorf("first publish request %v", pubs[0])
	}
	if pubs[1].GetReadonly() || strings.Join(pubs[1].GetVolumeCapability().GetMount().GetMountFlags(), ",") != "noatime" {
		t.Errorf("second publish request (volume's own mount flags, writable): %v", pubs[1])
	}
	if want := filepath.Join(h.dir, "csi", "publish", "a1", "v1"); p1 != want {
		t.Errorf("publish path %q, want %q", p1, want)
	}
	if link, err := os.Readlink(p1); err != nil || link != target1 {
		t.Errorf("publish path links to %q (%v), want %q", link, err, target1)
	}
	if u := m.Uses(); len(u) != 2 || u[0].User != "a1" || u[1].User != "a2" || u[1].Path != p2 || u[0].State != pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED {
		t.Errorf("uses %+v", u)
	}

	if err := m.Unpublish(ctx, "a1", "v1", nil); err != nil {
		t.Fatal(err)
	}
	if n := h.plugin.NodeUnstageVolume.Count(); n != 0 {
		t.Fatalf("unstaged with alloc a2 still using the volume (%d calls)", n)
	}
	if got := h.plugin.NodeUnpublishVolume.Last(); got.GetTargetPath() != target1 || got.GetVolumeId() != "ext-v1" {
		t.Errorf("unpublish request %v", got)
	}
	if _, err := os.Lstat(p1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a1's publish path still there: %v", err)
	}
	if rec := h.store.get("v1"); len(rec.GetUses()) != 1 || rec.GetStageState() != pb.VolumeStageState_VOLUME_STAGE_STATE_STAGED {
		t.Errorf("persisted after a1: %v", rec)
	}
	if err := m.Unpublish(ctx, "a2", "v1", nil); err != nil {
		t.Fatal(err)
	}
	if n := h.plugin.NodeUnstageVolume.Count(); n != 1 {
		t.Fatalf("%d unstage calls after the last user, want 1", n)
	}
	if got := h.plugin.NodeUnstageVolume.Last(); got.GetStagingTargetPath() != staging {
		t.Errorf("unstage request %v", got)
	}
	if rec := h.store.get("v1"); rec != nil {
		t.Errorf("record left after the last unstage: %v", rec)
	}
	// Done is done: a second teardown makes no call.
	if err := m.Unpublish(ctx, "a2", "v1", nil); err != nil || h.plugin.NodeUnpublishVolume.Count() != 2 {
		t.Errorf("second unpublish: %v, %d calls", err, h.plugin.NodeUnpublishVolume.Count())
	}
}

// A plugin without STAGE_UNSTAGE is published straight away and never
// staged or unstaged.
func TestNoStageWithoutCapability(t *testing.T) {
	h := newHarness(t)
	h.plugins.stage = false
	m := h.manager(t)
	if _, err := m.Publish(context.Background(), request("v1", "a1")); err != nil {
		t.Fatal(err)
	}
	if err := m.Unpublish(context.Background(), "a1", "v1", nil); err != nil {
		t.Fatal(err)
	}
	if s, u, p := h.plugin.NodeStageVolume.Count(), h.plugin.NodeUnstageVolume.Count(), h.plugin.NodePublishVolume.Count(); s != 0 || u != 0 || p != 1 {
		t.Fatalf("stage %d, unstage %d, publish %d; want 0, 0, 1", s, u, p)
	}
	if got := h.plugin.NodePublishVolume.Last().GetStagingTargetPath(); got != "" {
		t.Errorf("publish names staging path %q", got)
	}
}

// An isolated plugin is given targets under its stage_publish_dir.
func TestTargetsAsAnIsolatedPluginSeesThem(t *testing.T) {
	h := newHarness(t)
	h.plugins.stageDir = "/local/csi"
	m := h.manager(t)
	path, err := m.Publish(context.Background(), request("v1", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := h.plugin.NodeStageVolume.Last().GetStagingTargetPath(); got != "/local/csi/staging/v1" {
		t.Errorf("staging target %q", got)
	}
	if got := h.plugin.NodePublishVolume.Last().GetTargetPath(); got != "/local/csi/publish/a1/v1" {
		t.Errorf("publish target %q", got)
	}
	if link, _ := os.Readlink(path); link != filepath.Join(h.dir, "csi", "volumes", "hostpath", "publish", "a1", "v1") {
		t.Errorf("the host path links to %q", link)
	}
}

// Uncertain errors are retried with backoff until the call succeeds.
func TestUncertainErrorsAreRetried(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	h.plugin.NodeStageVolume.Next(nil, status.Error(codes.Unavailable, "busy"))
	h.plugin.NodeStageVolume.Next(nil, status.Error(codes.DeadlineExceeded, "slow"))
	h.plugin.NodeUnpublishVolume.Next(nil, status.Error(codes.Aborted, "operation pending"))
	if _, err := m.Publish(context.Background(), request("v1", "a1")); err != nil {
		t.Fatal(err)
	}
	if n := h.plugin.NodeStageVolume.Count(); n != 3 {
		t.Fatalf("%d stage calls, want 3 (two uncertain failures, then success)", n)
	}
	if err := m.Unpublish(context.Background(), "a1", "v1", nil); err != nil {
		t.Fatal(err)
	}
	if n := h.plugin.NodeUnpublishVolume.Count(); n != 2 {
		t.Fatalf("%d unpublish calls, want 2", n)
	}
	h.clock.mu.Lock()
	defer h.clock.mu.Unlock()
	if len(h.clock.waits) != 3 {
		t.Errorf("backoff waits %v, want 3", h.clock.waits)
	}
	for _, w := range h.clock.waits {
		if w <= 0 || w > 4*time.Millisecond {
			t.Errorf("wait %v outside (0, the 4ms cap]", w)
		}
	}
}

// A final error is returned at once, naming volume, alloc and node, and
// the use stays recorded so the teardown undoes the staging.
func TestFinalErrorSurfacesAndTeardownUndoes(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	h.plugin.NodePublishVolume.Next(nil, status.Error(codes.InvalidArgument, "bad mount flag"))
	_, err := m.Publish(context.Background(), request("v1", "a1"))
	if !csi.IsFinal(err) || errcode.Code(err) != codes.InvalidArgument {
		t.Fatalf("publish: %v, want the final InvalidArgument", err)
	}
	for _, s := range []string{`volume "v1"`, `alloc "a1"`, "node " + nodeID, "bad mount flag"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	if n := h.plugin.NodePublishVolume.Count(); n != 1 {
		t.Errorf("%d publish calls after a final error, want 1", n)
	}
	if rec := h.store.get("v1"); len(rec.GetUses()) != 1 || rec.GetUses()[0].GetState() != pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHING {
		t.Fatalf("record after the failure: %v", rec)
	}
	// The plugin never made the target: NotFound is success.
	h.plugin.NodeUnpublishVolume.Next(nil, status.Error(codes.NotFound, "no such target"))
	if err := m.Unpublish(context.Background(), "a1", "v1", nil); err != nil {
		t.Fatal(err)
	}
	if n := h.plugin.NodeUnstageVolume.Count(); n != 1 || h.store.get("v1") != nil {
		t.Errorf("after the teardown: %d unstage calls, record %v", n, h.store.get("v1"))
	}
}

// Calls about one volume are serialized: a second alloc's publish waits
// for the first's stage, and the volume is staged once.
func TestCallsOnOneVolumeAreSerialized(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	release := h.plugin.NodeStageVolume.Block()
	errs := make(chan error, 2)
	for _, a := range []string{"a1", "a2"} {
		go func() {
			_, err := m.Publish(context.Background(), request("v1", a))
			errs <- err
		}()
	}
	testutil.WaitFor(t, waitLimit, func() error {
		if n := h.plugin.NodeStageVolume.Count(); n != 1 {
			return fmt.Errorf("%d stage calls", n)
		}
		return nil
	})
	// Another volume is not held up by v1's.
	h.plugins.mu.Lock()
	h.plugins.stage = false
	h.plugins.mu.Unlock()
	if _, err := m.Publish(context.Background(), request("v2", "a3")); err != nil {
		t.Fatal(err)
	}
	if n := h.plugin.NodePublishVolume.Count(); n != 1 {
		t.Fatalf("%d publish calls while v1's stage hangs, want only v2's", n)
	}
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s, p := h.plugin.NodeStageVolume.Count(), h.plugin.NodePublishVolume.Count(); s != 1 || p != 3 {
		t.Fatalf("stage %d, publish %d; want 1 and 3", s, p)
	}
}

// A publish that waits for the volume's lock gives up with its context.
func TestLockWaitEndsWithContext(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	release := h.plugin.NodeStageVolume.Block()
	first := make(chan error, 1)
	go func() {
		_, err := m.Publish(context.Background(), request("v1", "a1"))
		first <- err
	}()
	testutil.WaitFor(t, waitLimit, func() error {
		if h.plugin.NodeStageVolume.Count() != 1 {
			return errors.New("first stage not under way")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := m.Publish(ctx, request("v1", "a2"))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `alloc "a2"`) {
		t.Fatalf("publish behind a hung one: %v", err)
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

func TestInvalidRequests(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	for _, r := range []PublishRequest{request("", "a1"), request("v1", ""), request("../v", "a1"), request("v1", "a/b")} {
		if _, err := m.Publish(context.Background(), r); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("publish of volume %q for %q: %v, want ErrInvalidRequest", r.Volume.GetId(), r.User, err)
		}
	}
	r := request("v1", "a1")
	if _, err := m.Publish(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	r.Volume.PluginId = "other"
	r.User = "a2"
	if _, err := m.Publish(context.Background(), r); !errors.Is(err, ErrPluginMismatch) {
		t.Errorf("publish through another plugin: %v, want ErrPluginMismatch", err)
	}
	if _, err := New(Config{DataDir: "rel", Store: h.store, Plugins: h.plugins}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("relative data dir: %v", err)
	}
}

func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrInvalidRequest: codes.InvalidArgument,
		ErrTearingDown:    codes.FailedPrecondition,
		ErrPluginMismatch: codes.FailedPrecondition,
		ErrInvalidConfig:  codes.InvalidArgument,
		ErrNotHeld:        codes.FailedPrecondition,
		ErrNoNodeExpand:   codes.FailedPrecondition,
	})
}
