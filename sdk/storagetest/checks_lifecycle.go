package storagetest

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// vol is a volume a lifecycle takes through its steps.
type vol struct {
	id  string
	ctx map[string]string
}

// dataFile is the file the node lifecycle writes through one publish and
// reads through the next.
const dataFile = "storagetest-data"

// checkControllerLifecycle: CreateVolume is idempotent by name and refuses
// the same name with an incompatible size; the volume validates;
// ControllerPublishVolume twice is once, with the same publish context;
// ControllerUnpublishVolume and DeleteVolume twice succeed; a deleted
// volume is gone. What applies follows the controller's capabilities.
func checkControllerLifecycle(t *testing.T, s *suite) {
	if !s.creates() && !s.attaches() {
		t.Skip("the adapter advertises neither CREATE_DELETE_VOLUME nor PUBLISH_UNPUBLISH_VOLUME")
	}
	var v *vol
	switch {
	case s.creates():
		v = s.createVolume(t)
		s.validate(t, v)
	case s.h.Volume.ExistingID != "":
		v = &vol{id: s.h.Volume.ExistingID, ctx: s.h.Volume.ExistingContext}
	default:
		t.Fatal("the adapter attaches volumes but does not create them: set Harness.Volume.ExistingID to a volume it has")
	}
	if s.attaches() {
		s.controllerPublish(t, v)
		s.controllerUnpublish(t, v)
	}
	if s.creates() {
		s.deleteVolume(t, v)
		ctx, cancel := s.ctx()
		defer cancel()
		_, err := s.ctl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: v.id, VolumeCapabilities: []*csipb.VolumeCapability{s.h.Volume.Capability}})
		wantCode(t, "ValidateVolumeCapabilities of a deleted volume", err, codes.NotFound)
	}
}

// checkNodeLifecycle takes a volume through berth's whole path, each step
// twice as berth may repeat it: create, attach (ControllerPublishVolume),
// stage, publish at a target, write a file there, unpublish (the target is
// gone), publish at another target (the file is there), unpublish,
// unstage, detach, delete. With an access mode that lets a node publish a
// volume more than once (SINGLE_NODE_MULTI_WRITER, MULTI_NODE_*), both
// targets are published at once, and unpublishing the first leaves the
// second whole.
func checkNodeLifecycle(t *testing.T, s *suite) {
	if s.nodeCaps == nil {
		t.Skip("the adapter serves no node")
	}
	s.requireNodeRoot(t)
	v := s.lifecycleVolume(t)
	pc := s.attach(t, v)
	staging, target1 := paths(t)
	_, target2 := paths(t)
	s.stage(t, v, pc, staging)
	s.publish(t, v, pc, staging, target1)
	s.writeData(t, target1, v.id)
	if sharedOnNode(s.h.Volume.Capability) {
		// berth publishes a shared volume once per alloc using it.
		s.publish(t, v, pc, staging, target2)
		s.readData(t, target2, v.id)
		s.unpublish(t, v, target1)
		s.readData(t, target2, v.id)
	} else {
		s.unpublish(t, v, target1)
		s.publish(t, v, pc, staging, target2)
		s.readData(t, target2, v.id)
	}
	s.unpublish(t, v, target2)
	s.unstage(t, v, staging)
	s.detach(t, v)
	if s.creates() {
		s.deleteVolume(t, v)
	}
}

// lifecycleVolume creates a volume, or names the existing one.
func (s *suite) lifecycleVolume(t *testing.T) *vol {
	t.Helper()
	switch {
	case s.creates():
		return s.createVolume(t)
	case s.h.Volume.ExistingID != "":
		return &vol{id: s.h.Volume.ExistingID, ctx: s.h.Volume.ExistingContext}
	}
	t.Fatal("the adapter does not create volumes: set Harness.Volume.ExistingID to a volume it can stage and publish")
	return nil
}

// cleanup registers undo, with a context of its own, to run when t ends:
// teardown calls are idempotent, so undoing a step the check already
// undid is harmless, and a failed check leaves nothing mounted.
func (s *suite) cleanup(t *testing.T, undo func(ctx context.Context) error) {
	t.Cleanup(func() {
		ctx, cancel := s.ctx()
		defer cancel()
		_ = undo(ctx)
	})
}

func (s *suite) createVolume(t *testing.T) *vol {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	req := &csipb.CreateVolumeRequest{
		Name:               s.name("vol"),
		VolumeCapabilities: []*csipb.VolumeCapability{s.h.Volume.Capability},
		Parameters:         s.h.Volume.Parameters,
	}
	if s.h.Volume.CapacityBytes > 0 {
		req.CapacityRange = &csipb.CapacityRange{RequiredBytes: s.h.Volume.CapacityBytes}
	}
	first, err := s.ctl.CreateVolume(ctx, req)
	if err != nil {
		t.Fatalf("CreateVolume(%s): %v", req.GetName(), err)
	}
	v := &vol{id: first.GetVolume().GetVolumeId(), ctx: first.GetVolume().GetVolumeContext()}
	if v.id == "" {
		t.Fatalf("CreateVolume(%s) answered no volume_id: %v", req.GetName(), first)
	}
	s.cleanup(t, func(ctx context.Context) error {
		_, err := s.ctl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.id})
		return err
	})
	size := first.GetVolume().GetCapacityBytes()
	if want := s.h.Volume.CapacityBytes; want > 0 && size != 0 && size < want {
		t.Errorf("CreateVolume(%s) made volume %s of %d bytes, %d required", req.GetName(), v.id, size, want)
	}
	again, err := s.ctl.CreateVolume(ctx, req)
	if err != nil {
		t.Fatalf("second CreateVolume(%s) with the same request: %v, want the same volume (CreateVolume is idempotent by name)", req.GetName(), err)
	}
	if again.GetVolume().GetVolumeId() != v.id || again.GetVolume().GetCapacityBytes() != size {
		t.Errorf("second CreateVolume(%s) answered volume %s of %d bytes, the first %s of %d bytes: want the same volume",
			req.GetName(), again.GetVolume().GetVolumeId(), again.GetVolume().GetCapacityBytes(), v.id, size)
	}
	if size > 0 {
		bigger := &csipb.CreateVolumeRequest{Name: req.GetName(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
			CapacityRange: &csipb.CapacityRange{RequiredBytes: size + 1<<20, LimitBytes: size + 1<<20}}
		_, err := s.ctl.CreateVolume(ctx, bigger)
		wantCode(t, "CreateVolume of an existing name with an incompatible capacity_range", err, codes.AlreadyExists)
	}
	return v
}

// validate checks that the volume supports the capability it was made
// with (berth validates a volume's capabilities when it is registered).
func (s *suite) validate(t *testing.T, v *vol) {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	caps := []*csipb.VolumeCapability{s.h.Volume.Capability}
	resp, err := s.ctl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: v.id, VolumeContext: v.ctx, VolumeCapabilities: caps})
	if err != nil || resp.GetConfirmed() == nil {
		t.Errorf("ValidateVolumeCapabilities of volume %s with the capability it was created with = %v, %v; want it confirmed", v.id, resp, err)
	}
}

func (s *suite) deleteVolume(t *testing.T, v *vol) {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	if _, err := s.ctl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
		t.Errorf("DeleteVolume(%s): %v", v.id, err)
	}
	_, err := s.ctl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.id})
	wantUndone(t, "second DeleteVolume("+v.id+")", err)
}

// attach controller-publishes v when the adapter attaches volumes and
// returns the publish context.
func (s *suite) attach(t *testing.T, v *vol) map[string]string {
	t.Helper()
	if !s.attaches() {
		return nil
	}
	return s.controllerPublish(t, v)
}

func (s *suite) detach(t *testing.T, v *vol) {
	t.Helper()
	if s.attaches() {
		s.controllerUnpublish(t, v)
	}
}

func (s *suite) controllerPublish(t *testing.T, v *vol) map[string]string {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	req := &csipb.ControllerPublishVolumeRequest{VolumeId: v.id, NodeId: s.publishNode(), VolumeCapability: s.h.Volume.Capability, VolumeContext: v.ctx}
	first, err := s.ctl.ControllerPublishVolume(ctx, req)
	if err != nil {
		t.Fatalf("ControllerPublishVolume(%s, node %s): %v", v.id, req.GetNodeId(), err)
	}
	s.cleanup(t, func(ctx context.Context) error {
		_, err := s.ctl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: req.GetNodeId()})
		return err
	})
	again, err := s.ctl.ControllerPublishVolume(ctx, req)
	if err != nil {
		t.Errorf("second ControllerPublishVolume(%s, node %s): %v, want OK (it is idempotent)", v.id, req.GetNodeId(), err)
	} else if !maps.Equal(again.GetPublishContext(), first.GetPublishContext()) {
		t.Errorf("second ControllerPublishVolume(%s) publish context %v, the first %v: it must not change", v.id, again.GetPublishContext(), first.GetPublishContext())
	}
	return first.GetPublishContext()
}

func (s *suite) controllerUnpublish(t *testing.T, v *vol) {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	req := &csipb.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: s.publishNode()}
	if _, err := s.ctl.ControllerUnpublishVolume(ctx, req); err != nil {
		t.Errorf("ControllerUnpublishVolume(%s, node %s): %v", v.id, req.GetNodeId(), err)
	}
	_, err := s.ctl.ControllerUnpublishVolume(ctx, req)
	wantUndone(t, "second ControllerUnpublishVolume("+v.id+")", err)
}

func (s *suite) stage(t *testing.T, v *vol, pc map[string]string, staging string) {
	t.Helper()
	if !s.stages() {
		return
	}
	ctx, cancel := s.ctx()
	defer cancel()
	req := &csipb.NodeStageVolumeRequest{VolumeId: v.id, PublishContext: pc, StagingTargetPath: staging, VolumeCapability: s.h.Volume.Capability, VolumeContext: v.ctx}
	if _, err := s.node.NodeStageVolume(ctx, req); err != nil {
		t.Fatalf("NodeStageVolume(%s at %s): %v", v.id, staging, err)
	}
	s.cleanup(t, func(ctx context.Context) error {
		_, err := s.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: staging})
		return err
	})
	if _, err := s.node.NodeStageVolume(ctx, req); err != nil {
		t.Errorf("second NodeStageVolume(%s at %s): %v, want OK (it is idempotent)", v.id, staging, err)
	}
}

func (s *suite) unstage(t *testing.T, v *vol, staging string) {
	t.Helper()
	if !s.stages() {
		return
	}
	ctx, cancel := s.ctx()
	defer cancel()
	req := &csipb.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: staging}
	if _, err := s.node.NodeUnstageVolume(ctx, req); err != nil {
		t.Errorf("NodeUnstageVolume(%s at %s): %v", v.id, staging, err)
	}
	_, err := s.node.NodeUnstageVolume(ctx, req)
	wantUndone(t, "second NodeUnstageVolume("+v.id+")", err)
}

// publish publishes v at target twice and checks that the target is what
// the capability asks for: a directory for mount access, a file for block.
func (s *suite) publish(t *testing.T, v *vol, pc map[string]string, staging, target string) {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	req := &csipb.NodePublishVolumeRequest{VolumeId: v.id, PublishContext: pc, TargetPath: target, VolumeCapability: s.h.Volume.Capability, VolumeContext: v.ctx}
	if s.stages() {
		req.StagingTargetPath = staging
	}
	if _, err := s.node.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("NodePublishVolume(%s at %s): %v", v.id, target, err)
	}
	s.cleanup(t, func(ctx context.Context) error {
		_, err := s.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: target})
		return err
	})
	if _, err := s.node.NodePublishVolume(ctx, req); err != nil {
		t.Errorf("second NodePublishVolume(%s at %s): %v, want OK (it is idempotent)", v.id, target, err)
	}
	st, err := os.Stat(target)
	switch {
	case err != nil:
		t.Fatalf("after NodePublishVolume(%s): target %s: %v", v.id, target, err)
	case s.h.Volume.Capability.GetMount() != nil && !st.IsDir():
		t.Fatalf("after NodePublishVolume(%s) with mount access: target %s is a %s, want a directory", v.id, target, st.Mode().Type())
	}
}

// unpublish unpublishes v from target twice; the target must be gone (the
// spec: the plugin deletes what it created at the target path).
func (s *suite) unpublish(t *testing.T, v *vol, target string) {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	req := &csipb.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: target}
	if _, err := s.node.NodeUnpublishVolume(ctx, req); err != nil {
		t.Fatalf("NodeUnpublishVolume(%s at %s): %v", v.id, target, err)
	}
	_, err := s.node.NodeUnpublishVolume(ctx, req)
	wantUndone(t, "second NodeUnpublishVolume("+v.id+")", err)
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("after NodeUnpublishVolume(%s): target %s is still there (%v): the plugin must delete what it created", v.id, target, err)
	}
}

// writeData writes a file into a mount-access volume published at target.
func (s *suite) writeData(t *testing.T, target, content string) {
	t.Helper()
	if s.h.Volume.Capability.GetMount() == nil {
		return
	}
	if err := os.WriteFile(filepath.Join(target, dataFile), []byte(content), 0o644); err != nil {
		t.Fatalf("writing into the published volume: %v", err)
	}
}

// readData checks that the file writeData wrote is in the volume at
// target.
func (s *suite) readData(t *testing.T, target, content string) {
	t.Helper()
	if s.h.Volume.Capability.GetMount() == nil {
		return
	}
	got, err := os.ReadFile(filepath.Join(target, dataFile))
	if err != nil || string(got) != content {
		t.Errorf("the file written through an earlier publish of the volume, read at %s: %q, %v; want %q", target, got, err, content)
	}
}

// sharedOnNode reports whether c's access mode lets a node publish the
// volume at more than one target at once (the spec's NodePublishVolume).
func sharedOnNode(c *csipb.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
		csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return true
	}
	return false
}
