//go:build linux

package hostpath

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// testController is a controller of cfg whose filesystem is measured by
// disk instead of statfs.
func testController(t *testing.T, cfg Config, disk func() (fsStats, error)) *controller {
	t.Helper()
	cfg.NodeID = "n1"
	cfg.StateDir = t.TempDir()
	rc, err := cfg.validateServices()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := newServices(rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	svc.ctrl.disk = disk
	return svc.ctrl
}

func diskOf(total, avail int64) func() (fsStats, error) {
	return func() (fsStats, error) { return fsStats{totalBytes: total, availBytes: avail}, nil }
}

func createNoSize(c *controller, name string, vc *csi.VolumeCapability) (*csi.CreateVolumeResponse, error) {
	return c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{vc}})
}

// A create without a capacity range leaves the size to the plugin (CSI
// spec): it picks at most 1GiB but no more than its largest volume, its
// capacity or what the disk has free, so it succeeds whenever some volume
// fits.
func TestCreateWithoutSizeFitsThePluginsLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		free int64
		want int64
	}{
		{"max-64MiB", Config{MaxVolumeSize: 64 * mib}, tib, 64 * mib},
		{"disk-512MiB", Config{}, 512 * mib, 512 * mib},
		{"capacity-100MiB", Config{Capacity: 100 * mib}, tib, 100 * mib},
		{"roomy", Config{}, tib, gib},
		{"odd-free", Config{}, 10*mib + 100, 10 * mib}, // a block image is whole sectors
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testController(t, tc.cfg, diskOf(2*tib, tc.free))
			for _, vc := range []*csi.VolumeCapability{mountCap(snw), blockCap(snw)} {
				name := "v-" + kindOf(vc)
				resp, err := createNoSize(c, name, vc)
				if err != nil {
					t.Fatalf("%s volume without a size: %v", kindOf(vc), err)
				}
				want := tc.want
				if kindOf(vc) == kindMount && tc.name == "odd-free" {
					want = tc.free
				}
				if got := resp.GetVolume().GetCapacityBytes(); got != want {
					t.Errorf("%s volume without a size: %d bytes, want %d", kindOf(vc), got, want)
				}
				if _, err := c.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId()}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	// A full disk is still ResourceExhausted, naming what is free.
	c := testController(t, Config{}, diskOf(tib, 0))
	_, err := createNoSize(c, "full", mountCap(snw))
	wantRefusal(t, err, codes.ResourceExhausted, "create without a size on a full disk", `"full"`, "0 bytes (0B) free")
}

func kindOf(vc *csi.VolumeCapability) string {
	if vc.GetBlock() != nil {
		return kindBlock
	}
	return kindMount
}

// A request larger than the whole filesystem can never fit: OutOfRange
// (not the temporary-sounding ResourceExhausted), naming the filesystem's
// size; larger than what is free now stays ResourceExhausted.
func TestVolumeLargerThanTheFilesystemIsOutOfRange(t *testing.T) {
	c := testController(t, Config{}, diskOf(100*mib, 50*mib))
	_, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "huge", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 200 * mib}})
	wantRefusal(t, err, codes.OutOfRange, "create larger than the filesystem", `"huge"`, "whole filesystem", "104857600 bytes (100MiB)")
	_, err = c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "big", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 80 * mib}})
	wantRefusal(t, err, codes.ResourceExhausted, "create larger than what is free", `"big"`, "52428800 bytes (50MiB) free")
}

// With a max_volume_size that is not whole 512-byte sectors, the largest
// block volume is the max rounded down: GetCapacity reports it and a
// create of exactly that size succeeds.
func TestBlockMaxVolumeSizeIsWholeSectors(t *testing.T) {
	const maxSize = 64*mib + 100
	c := testController(t, Config{MaxVolumeSize: maxSize}, diskOf(tib, tib))
	ctx := context.Background()
	for _, tc := range []struct {
		vc   *csi.VolumeCapability
		want int64
	}{{blockCap(snw), 64 * mib}, {mountCap(snw), maxSize}} {
		caps, err := c.GetCapacity(ctx, &csi.GetCapacityRequest{VolumeCapabilities: []*csi.VolumeCapability{tc.vc}})
		if err != nil {
			t.Fatal(err)
		}
		largest := caps.GetMaximumVolumeSize().GetValue()
		if largest != tc.want {
			t.Errorf("%s: GetCapacity's largest volume %d, want %d", kindOf(tc.vc), largest, tc.want)
		}
		name := "largest-" + kindOf(tc.vc)
		resp, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{tc.vc},
			CapacityRange: &csi.CapacityRange{RequiredBytes: largest}})
		if err != nil {
			t.Fatalf("%s volume of GetCapacity's largest size %d: %v", kindOf(tc.vc), largest, err)
		}
		if got := resp.GetVolume().GetCapacityBytes(); got != largest {
			t.Errorf("%s volume: %d bytes, want %d", kindOf(tc.vc), got, largest)
		}
	}
	_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "over", VolumeCapabilities: []*csi.VolumeCapability{blockCap(snw)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: maxSize}})
	wantRefusal(t, err, codes.OutOfRange, "block volume of the unrounded max", `"over"`, "67108864 bytes (64MiB", "whole 512-byte sectors")
}

// A group snapshot counts each member once against the disk: a copy
// already written lowers the filesystem's free space and no longer
// counts as reserved. 70MiB free, two volumes holding 30MiB each: the
// group (60MiB) fits.
func TestGroupSnapshotCountsWrittenMembersOnce(t *testing.T) {
	ctx := context.Background()
	var c *controller
	var base int64 // the state directory's usage when the disk had 70MiB free
	c = testController(t, Config{}, func() (fsStats, error) {
		u, err := diskUsage(ctx, c.lay.root)
		return fsStats{totalBytes: tib, availBytes: 70*mib - (u.bytes - base)}, err
	})
	var ids []string
	for _, name := range []string{"a", "b"} {
		resp, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 30 * mib}})
		if err != nil {
			t.Fatal(err)
		}
		id := resp.GetVolume().GetVolumeId()
		data := bytes.Repeat([]byte{'x'}, 30*mib)
		if err := os.WriteFile(filepath.Join(dataPath(c.lay.volumeDir(id), kindMount), "data"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	u, err := diskUsage(ctx, c.lay.root)
	if err != nil {
		t.Fatal(err)
	}
	base = u.bytes
	g := &groupController{c: c}
	if _, err := g.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: ids}); err != nil {
		t.Fatalf("group snapshot of 2x30MiB with 70MiB free: %v", err)
	}
	c.mu.RLock()
	reserved, diskReserved := c.reserved, c.diskReserved
	c.mu.RUnlock()
	if reserved != 0 || diskReserved != 0 {
		t.Errorf("after the group snapshot: %d bytes reserved, %d on the disk; want none", reserved, diskReserved)
	}
	// A group that cannot fit is refused before anything is copied.
	_, err = g.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "g2", SourceVolumeIds: ids})
	wantRefusal(t, err, codes.ResourceExhausted, "a second group snapshot", `"g2"`)
	if left, _ := filepath.Glob(filepath.Join(c.lay.groupsDir(), tmpPrefix+"*")); len(left) != 0 {
		t.Errorf("the refused group left %v", left)
	}
}
