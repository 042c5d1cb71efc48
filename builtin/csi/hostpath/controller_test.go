//go:build linux

package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const mib = 1 << 20

func TestCreateVolumeIdempotent(t *testing.T) {
	p := startPlugin(t, Config{NodeID: "n1", StateDir: t.TempDir(), Capacity: 1 << 30})
	ctx := testCtx(t)
	req := &csi.CreateVolumeRequest{
		Name:               "data",
		VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 10 * mib},
		Parameters:         map[string]string{ParamMode: "0750"},
	}
	first, err := p.ctrl.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.ctrl.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if first.Volume.VolumeId != again.Volume.VolumeId || again.Volume.CapacityBytes != 10*mib {
		t.Fatalf("repeated create returned %v, first %v", again.Volume, first.Volume)
	}
	fi, err := os.Stat(filepath.Join(p.srv.cfg.StateDir, "volumes", first.Volume.VolumeId, "data"))
	if err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("volume root: %v, %v; want mode 0750", fi.Mode(), err)
	}

	incompatible := map[string]func(*csi.CreateVolumeRequest){
		"larger capacity": func(r *csi.CreateVolumeRequest) { r.CapacityRange = &csi.CapacityRange{RequiredBytes: 20 * mib} },
		"smaller limit":   func(r *csi.CreateVolumeRequest) { r.CapacityRange = &csi.CapacityRange{LimitBytes: 5 * mib} },
		"other params":    func(r *csi.CreateVolumeRequest) { r.Parameters = map[string]string{ParamMode: "0700"} },
		"block access": func(r *csi.CreateVolumeRequest) {
			r.VolumeCapabilities, r.Parameters = []*csi.VolumeCapability{blockCap(snw)}, nil
		},
		"other pool": func(r *csi.CreateVolumeRequest) {
			r.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{PoolTopologyKey: "elsewhere"}}}}
		},
	}
	for name, edit := range incompatible {
		r := cloneReq(req)
		edit(r)
		_, err := p.ctrl.CreateVolume(ctx, r)
		wantCode(t, err, codes.AlreadyExists, name)
	}
	list, err := p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil || len(list.Entries) != 1 {
		t.Fatalf("after repeated and refused creates: %d volumes, %v; want 1", len(list.GetEntries()), err)
	}
}

func cloneReq(r *csi.CreateVolumeRequest) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name: r.Name, VolumeCapabilities: r.VolumeCapabilities, CapacityRange: r.CapacityRange,
		Parameters: r.Parameters, AccessibilityRequirements: r.AccessibilityRequirements,
	}
}

func TestCapacityAccounting(t *testing.T) {
	p := startPlugin(t, Config{NodeID: "n1", StateDir: t.TempDir(), Capacity: 100 * mib})
	ctx := testCtx(t)
	if got := p.available(t); got != 100*mib {
		t.Fatalf("empty plugin: available %d, want %d", got, 100*mib)
	}
	v1 := p.createVolume(t, "v1", 60*mib, mountCap(snw))
	if got := p.available(t); got != 40*mib {
		t.Fatalf("after a 60MiB volume: available %d, want %d", got, 40*mib)
	}
	_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v2", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 50 * mib}})
	wantCode(t, err, codes.ResourceExhausted, "volume larger than what is free")
	_, err = p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v3", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 200 * mib}})
	wantCode(t, err, codes.OutOfRange, "volume larger than the whole capacity")
	_, err = p.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v1.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 120 * mib}})
	wantCode(t, err, codes.OutOfRange, "expansion beyond the whole capacity")
	_, err = p.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v1.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 101 * mib}})
	wantCode(t, err, codes.OutOfRange, "expansion beyond the whole capacity")
	exp, err := p.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v1.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 70 * mib}})
	if err != nil || exp.CapacityBytes != 70*mib || !exp.NodeExpansionRequired {
		t.Fatalf("expand to 70MiB: %v, %v", exp, err)
	}
	if got := p.available(t); got != 30*mib {
		t.Fatalf("after expanding to 70MiB: available %d, want %d", got, 30*mib)
	}

	// A snapshot takes the space of its copy.
	data := filepath.Join(p.srv.cfg.StateDir, "volumes", v1.VolumeId, "data", "blob")
	if err := os.WriteFile(data, make([]byte, 8*mib), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s1", SourceVolumeId: v1.VolumeId})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Snapshot.SizeBytes != 70*mib {
		t.Errorf("snapshot size %d, want the volume's capacity %d", snap.Snapshot.SizeBytes, 70*mib)
	}
	after := p.available(t)
	if taken := 30*mib - after; taken < 8*mib || taken > 9*mib {
		t.Fatalf("snapshot of 8MiB of content took %d bytes of capacity", taken)
	}
	if _, err := p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v1.VolumeId}); err != nil {
		t.Fatal(err)
	}
	if got := p.available(t); got != after+70*mib {
		t.Fatalf("after deleting the volume: available %d, want %d", got, after+70*mib)
	}
	if _, err := p.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId}); err != nil {
		t.Fatal(err)
	}
	if got := p.available(t); got != 100*mib {
		t.Fatalf("after deleting everything: available %d, want %d", got, 100*mib)
	}
}

func TestConcurrentCreates(t *testing.T) {
	p := startPlugin(t, Config{NodeID: "n1", StateDir: t.TempDir(), Capacity: 10 * 10 * mib})
	ctx := testCtx(t)

	// One name, many callers: one volume.
	ids := make([]string, 16)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			resp, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "same", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
				CapacityRange: &csi.CapacityRange{RequiredBytes: 10 * mib}})
			if err != nil {
				t.Errorf("create %d: %v", i, err)
				return
			}
			ids[i] = resp.Volume.VolumeId
		})
	}
	wg.Wait()
	if distinct := slices.Compact(slices.Sorted(slices.Values(ids))); len(distinct) != 1 || distinct[0] == "" {
		t.Fatalf("concurrent creates of one name made volumes %v", distinct)
	}

	// Many names racing for the 90MiB left: exactly nine fit.
	var ok, exhausted int
	var mu sync.Mutex
	for i := range 30 {
		wg.Go(func() {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("v%d", i), VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
				CapacityRange: &csi.CapacityRange{RequiredBytes: 10 * mib}})
			mu.Lock()
			defer mu.Unlock()
			switch status.Code(err) {
			case codes.OK:
				ok++
			case codes.ResourceExhausted:
				exhausted++
			default:
				t.Errorf("create v%d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if ok != 9 || exhausted != 21 {
		t.Fatalf("%d creates succeeded and %d were refused; want 9 and 21", ok, exhausted)
	}
	if got := p.available(t); got != 0 {
		t.Fatalf("available %d after filling the plugin", got)
	}
	entries, err := os.ReadDir(filepath.Join(p.srv.cfg.StateDir, "volumes"))
	if err != nil || len(entries) != 10 {
		t.Fatalf("volumes directory holds %d entries, %v; want 10", len(entries), err)
	}
}

// startNode starts a node-mode plugin sharing the controller's state dir.
func startNode(t *testing.T, stateDir, id string, topology map[string]string, maxVolumes int64) *plugin {
	return startPlugin(t, Config{Mode: ModeNode, NodeID: id, StateDir: stateDir, Topology: topology, MaxVolumes: maxVolumes})
}

func TestControllerPublishAccessModes(t *testing.T) {
	state := t.TempDir()
	p := startPlugin(t, Config{Mode: ModeController, StateDir: state})
	startNode(t, state, "a", nil, 0)
	startNode(t, state, "b", nil, 0)
	ctx := testCtx(t)
	publish := func(vol, node string, c *csi.VolumeCapability, ro bool) (*csi.ControllerPublishVolumeResponse, error) {
		return p.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: node, VolumeCapability: c, Readonly: ro})
	}

	single := p.createVolume(t, "single", mib, mountCap(snw)).VolumeId
	first, err := publish(single, "a", mountCap(snw), false)
	if err != nil {
		t.Fatal(err)
	}
	if first.PublishContext[PublishContextNode] != "a" || first.PublishContext[PublishContextReadOnly] != "false" || first.PublishContext[PublishContextKind] != kindMount {
		t.Fatalf("publish context %v", first.PublishContext)
	}
	again, err := publish(single, "a", mountCap(snw), false)
	if err != nil || !equalMaps(again.PublishContext, first.PublishContext) {
		t.Fatalf("repeated publish: %v, %v", again, err)
	}
	_, err = publish(single, "a", mountCap(snw), true)
	wantCode(t, err, codes.AlreadyExists, "same node, other readonly flag")
	_, err = publish(single, "b", mountCap(snw), false)
	wantCode(t, err, codes.FailedPrecondition, "single-node volume to a second node")
	if !strings.Contains(status.Convert(err).Message(), `node "a"`) {
		t.Errorf("refusal %q does not name the node holding the volume", status.Convert(err).Message())
	}
	_, err = publish(single, "b", mountCap(mnmw), false)
	wantCode(t, err, codes.FailedPrecondition, "multi-node publish while held single-node")
	_, err = p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: single})
	wantCode(t, err, codes.FailedPrecondition, "delete of a published volume")
	if _, err := p.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: single, NodeId: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := publish(single, "b", mountCap(snw), false); err != nil {
		t.Fatalf("publish to b after unpublishing from a: %v", err)
	}

	multi := p.createVolume(t, "multi", mib, mountCap(mnmw)).VolumeId
	for _, n := range []string{"a", "b"} {
		if _, err := publish(multi, n, mountCap(mnmw), false); err != nil {
			t.Fatalf("multi-writer publish to %s: %v", n, err)
		}
	}
	got, err := p.ctrl.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: multi})
	if err != nil || !slices.Equal(got.Status.PublishedNodeIds, []string{"a", "b"}) {
		t.Fatalf("published nodes %v, %v; want [a b]", got.GetStatus().GetPublishedNodeIds(), err)
	}

	oneWriter := p.createVolume(t, "one-writer", mib, mountCap(mnsw)).VolumeId
	if _, err := publish(oneWriter, "a", mountCap(mnsw), false); err != nil {
		t.Fatal(err)
	}
	_, err = publish(oneWriter, "b", mountCap(mnsw), false)
	wantCode(t, err, codes.FailedPrecondition, "second writer of a MULTI_NODE_SINGLE_WRITER volume")
	if _, err := publish(oneWriter, "b", mountCap(mnsw), true); err != nil {
		t.Fatalf("reader of a MULTI_NODE_SINGLE_WRITER volume: %v", err)
	}

	readers := p.createVolume(t, "readers", mib, mountCap(mnro)).VolumeId
	ro, err := publish(readers, "a", mountCap(mnro), false)
	if err != nil || ro.PublishContext[PublishContextReadOnly] != "true" {
		t.Fatalf("reader-only publish without readonly flag: context %v, %v; want readonly", ro.GetPublishContext(), err)
	}

	_, err = publish(multi, "nobody", mountCap(mnmw), false)
	wantCode(t, err, codes.NotFound, "unknown node")
	_, err = publish("vol-000000000000000000000000", "a", mountCap(snw), false)
	wantCode(t, err, codes.NotFound, "unknown volume")
	_, err = publish(single, "b", blockCap(snw), false)
	wantCode(t, err, codes.InvalidArgument, "block access to a mount volume")

	// Unpublishing what is not published, or from nodes that never were, is fine.
	for _, req := range []*csi.ControllerUnpublishVolumeRequest{
		{VolumeId: readers, NodeId: "b"},
		{VolumeId: readers, NodeId: "gone"},
		{VolumeId: "vol-000000000000000000000000", NodeId: "a"},
		{VolumeId: "../../etc", NodeId: "a"},
	} {
		if _, err := p.ctrl.ControllerUnpublishVolume(ctx, req); err != nil {
			t.Errorf("unpublish %v: %v", req, err)
		}
	}
	// An empty node ID unpublishes from every node.
	if _, err := p.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: multi}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: multi}); err != nil {
		t.Fatalf("delete after unpublishing from all nodes: %v", err)
	}
}

func TestControllerPublishLimitsAndTopology(t *testing.T) {
	state := t.TempDir()
	p := startPlugin(t, Config{Mode: ModeController, StateDir: state})
	startNode(t, state, "z1-node", map[string]string{"zone": "z1"}, 1)
	startNode(t, state, "z2-node", map[string]string{"zone": "z2"}, 0)
	ctx := testCtx(t)

	create := func(name, zone string) (*csi.Volume, error) {
		req := &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)}}
		if zone != "" {
			req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{"zone": zone}}}}
		}
		resp, err := p.ctrl.CreateVolume(ctx, req)
		return resp.GetVolume(), err
	}
	inZ1, err := create("in-z1", "z1")
	if err != nil {
		t.Fatal(err)
	}
	topo := inZ1.AccessibleTopology[0].Segments
	if topo["zone"] != "z1" || topo[PoolTopologyKey] == "" {
		t.Fatalf("volume topology %v, want zone z1 and the pool", topo)
	}
	_, err = create("in-z3", "z3")
	wantCode(t, err, codes.ResourceExhausted, "topology no node lies in")

	_, err = p.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: inZ1.VolumeId, NodeId: "z2-node", VolumeCapability: mountCap(snw)})
	wantCode(t, err, codes.FailedPrecondition, "publish outside the volume's topology")
	if _, err := p.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: inZ1.VolumeId, NodeId: "z1-node", VolumeCapability: mountCap(snw)}); err != nil {
		t.Fatal(err)
	}
	other, err := create("other", "z1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: other.VolumeId, NodeId: "z1-node", VolumeCapability: mountCap(snw)})
	wantCode(t, err, codes.ResourceExhausted, "publish beyond the node's max volumes")
	if _, err := p.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: inZ1.VolumeId, NodeId: "z1-node"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: other.VolumeId, NodeId: "z1-node", VolumeCapability: mountCap(snw)}); err != nil {
		t.Fatalf("publish after a slot was freed: %v", err)
	}

	cap := func(zone string) int64 {
		resp, err := p.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{AccessibleTopology: &csi.Topology{Segments: map[string]string{"zone": zone}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.AvailableCapacity
	}
	if cap("z1") == 0 || cap("z9") != 0 {
		t.Fatalf("capacity in z1 = %d (want > 0), in z9 = %d (want 0)", cap("z1"), cap("z9"))
	}
}

func TestBadInput(t *testing.T) {
	state := t.TempDir()
	p := startPlugin(t, Config{NodeID: "n1", StateDir: state})
	ctx := testCtx(t)
	vol := p.createVolume(t, "v", mib, mountCap(snw)).VolumeId
	caps := []*csi.VolumeCapability{mountCap(snw)}
	fsType := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: snw},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}}
	traversal := "../../../etc"

	cases := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"create: name too long", func() error {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: strings.Repeat("n", 129), VolumeCapabilities: caps})
			return err
		}, codes.InvalidArgument},
		{"create: control character in name", func() error {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "a\x01b", VolumeCapabilities: caps})
			return err
		}, codes.InvalidArgument},
		{"create: fs_type", func() error {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{fsType}})
			return err
		}, codes.InvalidArgument},
		{"create: unknown mount flag", func() error {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw, "data=journal")}})
			return err
		}, codes.InvalidArgument},
		{"create: mount and block", func() error {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw), blockCap(snw)}})
			return err
		}, codes.InvalidArgument},
		{"create: no access mode", func() error {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Block{}}}})
			return err
		}, codes.InvalidArgument},
		{"create: limit below required", func() error {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * mib, LimitBytes: mib}})
			return err
		}, codes.InvalidArgument},
		{"create: unknown parameter", func() error {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps, Parameters: map[string]string{"fstype": "xfs"}})
			return err
		}, codes.InvalidArgument},
		{"create: bad mode parameter", func() error {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps, Parameters: map[string]string{ParamMode: "rwx"}})
			return err
		}, codes.InvalidArgument},
		{"create: source snapshot path traversal", func() error {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps,
				VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: traversal}}}})
			return err
		}, codes.NotFound},
		{"create: block source for mount volume", func() error {
			_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{blockCap(snw)},
				VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: vol}}}})
			return err
		}, codes.InvalidArgument},
		{"list: invalid token", func() error {
			_, err := p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: "after:" + traversal})
			return err
		}, codes.Aborted},
		{"list: negative max_entries", func() error {
			_, err := p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: -1})
			return err
		}, codes.InvalidArgument},
		{"list snapshots: invalid token", func() error {
			_, err := p.ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: "after:" + vol})
			return err
		}, codes.Aborted},
		{"validate: path traversal", func() error {
			_, err := p.ctrl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: traversal, VolumeCapabilities: caps})
			return err
		}, codes.NotFound},
		{"expand: shrink is a no-op, no range is not", func() error {
			_, err := p.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: vol})
			return err
		}, codes.InvalidArgument},
		{"modify: block parameter on unknown key", func() error {
			_, err := p.ctrl.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: vol, MutableParameters: map[string]string{ParamUID: "-3"}})
			return err
		}, codes.InvalidArgument},
		{"snapshot: parameters", func() error {
			_, err := p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: vol, Parameters: map[string]string{"k": "v"}})
			return err
		}, codes.InvalidArgument},
		{"snapshot: unknown source", func() error {
			_, err := p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: traversal})
			return err
		}, codes.NotFound},
		{"node stage: relative staging path", func() error {
			_, err := p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: "rel/path", VolumeCapability: caps[0]})
			return err
		}, codes.InvalidArgument},
		{"node stage: published to another node", func() error {
			_, err := p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: "/tmp/x", VolumeCapability: caps[0],
				PublishContext: map[string]string{PublishContextNode: "n2"}})
			return err
		}, codes.FailedPrecondition},
		{"node stage: unknown volume", func() error {
			_, err := p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: traversal, StagingTargetPath: "/tmp/x", VolumeCapability: caps[0]})
			return err
		}, codes.NotFound},
		{"node publish: not staged", func() error {
			_, err := p.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol, TargetPath: "/tmp/t", StagingTargetPath: "/tmp/s", VolumeCapability: caps[0]})
			return err
		}, codes.FailedPrecondition},
		{"node publish: no staging path", func() error {
			_, err := p.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol, TargetPath: "/tmp/t", VolumeCapability: caps[0]})
			return err
		}, codes.FailedPrecondition},
		{"node stats: not staged", func() error {
			_, err := p.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: "/tmp/s"})
			return err
		}, codes.NotFound},
		{"group: duplicate source", func() error {
			_, err := p.group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{vol, vol}})
			return err
		}, codes.InvalidArgument},
	}
	for _, tc := range cases {
		wantCode(t, tc.call(), tc.want, tc.name)
	}
	// Deleting an ID that cannot exist succeeds and touches nothing.
	if _, err := p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "../volumes"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, "volumes", vol)); err != nil {
		t.Fatalf("volume directory gone after deleting a traversal ID: %v", err)
	}
}

func TestListPagination(t *testing.T) {
	p := startPlugin(t, Config{NodeID: "n1", StateDir: t.TempDir()})
	ctx := testCtx(t)
	var all []string
	for i := range 5 {
		all = append(all, p.createVolume(t, fmt.Sprintf("v%d", i), mib, mountCap(snw)).VolumeId)
	}
	page1, err := p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: 2})
	if err != nil || len(page1.Entries) != 2 || page1.NextToken == "" {
		t.Fatalf("first page: %v, %v", page1, err)
	}
	// Deleting the volume the token points after must not break the listing.
	last := page1.Entries[1].Volume.VolumeId
	if _, err := p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: last}); err != nil {
		t.Fatal(err)
	}
	seen := []string{page1.Entries[0].Volume.VolumeId, last}
	token := page1.NextToken
	for token != "" {
		page, err := p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entries {
			seen = append(seen, e.Volume.VolumeId)
		}
		token = page.NextToken
	}
	if !slices.Equal(seen, all) {
		t.Fatalf("paged listing saw %v, want the volumes in creation order %v", seen, all)
	}
}

func TestGroupSnapshots(t *testing.T) {
	state := t.TempDir()
	p := startPlugin(t, Config{NodeID: "n1", StateDir: state, Capacity: 100 * mib})
	ctx := testCtx(t)
	a := p.createVolume(t, "a", mib, mountCap(snw)).VolumeId
	b := p.createVolume(t, "b", mib, blockCap(snw)).VolumeId
	req := &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{a, b}}
	g, err := p.group.CreateVolumeGroupSnapshot(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	gs := g.GroupSnapshot
	if len(gs.Snapshots) != 2 || !gs.ReadyToUse {
		t.Fatalf("group snapshot %v", gs)
	}
	for _, s := range gs.Snapshots {
		if s.GroupSnapshotId != gs.GroupSnapshotId {
			t.Errorf("member %s has group %q, want %q", s.SnapshotId, s.GroupSnapshotId, gs.GroupSnapshotId)
		}
	}
	again, err := p.group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{b, a}})
	if err != nil || again.GroupSnapshot.GroupSnapshotId != gs.GroupSnapshotId {
		t.Fatalf("repeated group create: %v, %v", again, err)
	}
	_, err = p.group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{a}})
	wantCode(t, err, codes.AlreadyExists, "same group name, other volumes")
	_, err = p.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: gs.Snapshots[0].SnapshotId})
	wantCode(t, err, codes.InvalidArgument, "deleting a group member alone")
	_, err = p.group.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GroupSnapshotId, SnapshotIds: []string{gs.Snapshots[0].SnapshotId}})
	wantCode(t, err, codes.InvalidArgument, "get with a partial snapshot list")

	// A member restores like any snapshot.
	restored, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "from-group", VolumeCapabilities: []*csi.VolumeCapability{blockCap(snw)},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: memberOf(gs, b)}}}})
	if err != nil || restored.Volume.CapacityBytes != mib {
		t.Fatalf("restore a group member: %v, %v", restored, err)
	}

	if _, err := p.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: a, NodeId: "n1", VolumeCapability: mountCap(snw)}); err != nil {
		t.Fatal(err)
	}
	_, err = p.group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "g2", SourceVolumeIds: []string{a, b}})
	wantCode(t, err, codes.FailedPrecondition, "group snapshot of a published volume")

	if _, err := p.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GroupSnapshotId}); err != nil {
		t.Fatal(err)
	}
	list, err := p.ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil || len(list.Entries) != 0 {
		t.Fatalf("snapshots after deleting the group: %v, %v", list, err)
	}
	if _, err := os.Stat(filepath.Join(state, "groups", gs.GroupSnapshotId)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("group directory after delete: %v", err)
	}
}

func memberOf(g *csi.VolumeGroupSnapshot, vol string) string {
	for _, s := range g.Snapshots {
		if s.SourceVolumeId == vol {
			return s.SnapshotId
		}
	}
	return ""
}

func TestSanitizeRedactsSecrets(t *testing.T) {
	out := sanitize(&csi.NodeStageVolumeRequest{VolumeId: "v", Secrets: map[string]string{"password": "hunter2"}})
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "password") || !strings.Contains(out, `"v"`) {
		t.Fatalf("sanitized request %s", out)
	}
	out = sanitize(&csi.NodeExpandVolumeRequest{VolumeId: "v", Secrets: map[string]string{"token": "s3cr3t"}})
	if strings.Contains(out, "s3cr3t") {
		t.Fatalf("sanitized request %s", out)
	}
}

func TestConcurrentPublishRespectsMaxVolumes(t *testing.T) {
	state := t.TempDir()
	p := startPlugin(t, Config{Mode: ModeController, StateDir: state})
	startNode(t, state, "small", nil, 3)
	ctx := testCtx(t)
	var vols []string
	for i := range 12 {
		vols = append(vols, p.createVolume(t, fmt.Sprintf("v%d", i), mib, mountCap(snw)).VolumeId)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, exhausted int
	for _, v := range vols {
		// Each volume is published twice at once: the repeat must be
		// idempotent, not a second slot.
		for range 2 {
			wg.Go(func() {
				_, err := p.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v, NodeId: "small", VolumeCapability: mountCap(snw)})
				mu.Lock()
				defer mu.Unlock()
				switch status.Code(err) {
				case codes.OK:
					ok++
				case codes.ResourceExhausted:
					exhausted++
				default:
					t.Errorf("publish %s: %v", v, err)
				}
			})
		}
	}
	wg.Wait()
	list, err := p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	attached := 0
	for _, e := range list.Entries {
		attached += len(e.Status.PublishedNodeIds)
	}
	if attached != 3 || ok != 6 || exhausted != 18 {
		t.Fatalf("%d volumes attached (%d publishes succeeded, %d refused); want 3 attached by 6 calls", attached, ok, exhausted)
	}
}
