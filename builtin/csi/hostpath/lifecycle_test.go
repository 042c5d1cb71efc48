//go:build linux

package hostpath

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"berth.dev/berth/internal/version"
)

func TestRestartKeepsState(t *testing.T) {
	state := t.TempDir()
	cfg := Config{NodeID: "n1", StateDir: state, Capacity: 100 * mib}
	p := startPlugin(t, cfg)
	ctx := testCtx(t)
	vol := p.createVolume(t, "keep", 10*mib, mountCap(snw))
	if err := os.WriteFile(filepath.Join(state, "volumes", vol.VolumeId, "data", "hello"), []byte("world"), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "keep-snap", SourceVolumeId: vol.VolumeId})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol.VolumeId, NodeId: "n1", VolumeCapability: mountCap(snw)}); err != nil {
		t.Fatal(err)
	}
	availBefore := p.available(t)
	p.stop()

	// What a crash in the middle of a create or delete leaves behind.
	leftovers := []string{
		filepath.Join(state, "volumes", tmpPrefix+"vol-18ea1f13e525293eae1d835b"),
		filepath.Join(state, "snapshots", tmpPrefix+"snap-18ea1f13e525293eae1d835b"),
		filepath.Join(state, "trash", "vol-18ea1f13e525293eae1d835c-0011"),
	}
	for _, d := range leftovers {
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
	}

	p = startPlugin(t, cfg)
	for _, d := range leftovers {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leftover %s survived the restart: %v", d, err)
		}
	}
	list, err := p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil || len(list.Entries) != 1 {
		t.Fatalf("after restart: %v, %v; want one volume", list, err)
	}
	if e := list.Entries[0]; e.Volume.VolumeId != vol.VolumeId || e.Volume.CapacityBytes != 10*mib || !slices.Equal(e.Status.PublishedNodeIds, []string{"n1"}) {
		t.Fatalf("after restart the volume is %v published to %v", e.Volume, e.Status.PublishedNodeIds)
	}
	snaps, err := p.ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil || len(snaps.Entries) != 1 || snaps.Entries[0].Snapshot.SnapshotId != snap.Snapshot.SnapshotId {
		t.Fatalf("after restart snapshots are %v, %v", snaps, err)
	}
	if got := p.available(t); got != availBefore {
		t.Fatalf("after restart available capacity %d, before %d", got, availBefore)
	}
	again := p.createVolume(t, "keep", 10*mib, mountCap(snw))
	if again.VolumeId != vol.VolumeId {
		t.Fatalf("create by name after restart made %s, want the existing %s", again.VolumeId, vol.VolumeId)
	}
	restored, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "restored", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}}})
	if err != nil {
		t.Fatal(err)
	}
	if restored.Volume.CapacityBytes != 10*mib {
		t.Errorf("volume from a 10MiB volume's snapshot has %d bytes", restored.Volume.CapacityBytes)
	}
	b, err := os.ReadFile(filepath.Join(state, "volumes", restored.Volume.VolumeId, "data", "hello"))
	if err != nil || string(b) != "world" {
		t.Fatalf("restored content %q, %v; want %q", b, err, "world")
	}
}

func TestSecondInstanceRefused(t *testing.T) {
	state := t.TempDir()
	p := startPlugin(t, Config{NodeID: "n1", StateDir: state})
	_, err := Start(testCtx(t), Config{Mode: ModeController, Endpoint: filepath.Join(t.TempDir(), "c.sock"), StateDir: state})
	if !errors.Is(err, ErrStateDirInUse) {
		t.Fatalf("second controller: %v, want ErrStateDirInUse", err)
	}
	_, err = Start(testCtx(t), Config{Mode: ModeNode, NodeID: "n1", Endpoint: filepath.Join(t.TempDir(), "n.sock"), StateDir: state})
	if !errors.Is(err, ErrStateDirInUse) {
		t.Fatalf("second node n1: %v, want ErrStateDirInUse", err)
	}
	_, err = Start(testCtx(t), Config{Mode: ModeNode, NodeID: "n2", Endpoint: p.srv.cfg.socketPath, StateDir: state})
	if !errors.Is(err, ErrEndpointInUse) {
		t.Fatalf("second plugin on a served socket: %v, want ErrEndpointInUse", err)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	state := t.TempDir()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Endpoint: "unix://" + sock, NodeID: "n1", StateDir: state, Logger: testLogger(t, hclog.Info)})
	}()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Run gives no signal that it listens: wait for the socket to answer.
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(testCtx(t), &csi.GetPluginInfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != PluginName || info.VendorVersion != version.Version {
		t.Fatalf("plugin info %v", info)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after its context ended", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket still there after Run returned: %v", err)
	}
	// The state directory is free again.
	startPlugin(t, Config{NodeID: "n1", StateDir: state})
}

func TestCorruptRecordStopsStart(t *testing.T) {
	state := t.TempDir()
	p := startPlugin(t, Config{NodeID: "n1", StateDir: state})
	vol := p.createVolume(t, "v", mib, mountCap(snw)).VolumeId
	p.stop()
	record := filepath.Join(state, "volumes", vol, "volume.json")
	if err := os.WriteFile(record, []byte(`{"version": 1, "id":`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Start(testCtx(t), Config{Endpoint: filepath.Join(t.TempDir(), "s.sock"), NodeID: "n1", StateDir: state, Logger: testLogger(t, hclog.Info)})
	var re *RecordError
	if !errors.As(err, &re) || re.Path != record {
		t.Fatalf("start over a corrupt record: %v, want a RecordError for %s", err, record)
	}
}
