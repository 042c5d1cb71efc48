//go:build linux

package hostpath

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	gib = 1 << 30
	tib = 1 << 40
)

// wantRefusal fails the test unless err carries code and a message naming
// every one of names.
func wantRefusal(t *testing.T, err error, code codes.Code, what string, names ...string) {
	t.Helper()
	wantCode(t, err, code, what)
	for _, n := range names {
		if !strings.Contains(status.Convert(err).Message(), n) {
			t.Errorf("%s: message %q does not name %q", what, status.Convert(err).Message(), n)
		}
	}
}

// Without a configured capacity, a volume above MaxVolumeSize (1TiB by
// default, as the kubernetes-csi hostpath driver) is OutOfRange, naming the
// volume and the limit, and nothing is made; GetCapacity says so.
func TestVolumeAboveMaxVolumeSizeIsOutOfRange(t *testing.T) {
	p := startPlugin(t, Config{NodeID: "n1", StateDir: t.TempDir()})
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		size int64
		cap  *csi.VolumeCapability
	}{
		{"huge", 100 * tib, mountCap(snw)},
		{"maxint", math.MaxInt64, mountCap(snw)},
		{"huge-block", 100 * tib, blockCap(snw)},
		{"just-over", tib + 1, mountCap(snw)},
	} {
		_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: tc.name, VolumeCapabilities: []*csi.VolumeCapability{tc.cap},
			CapacityRange: &csi.CapacityRange{RequiredBytes: tc.size}})
		wantRefusal(t, err, codes.OutOfRange, "create "+tc.name, `"`+tc.name+`"`, "1099511627776 bytes (1TiB", "max_volume_size")
	}
	list, err := p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil || len(list.GetEntries()) != 0 {
		t.Fatalf("volumes after refused creates: %v, %v", list.GetEntries(), err)
	}
	matches, _ := filepath.Glob(filepath.Join(p.srv.cfg.StateDir, "volumes", "*"))
	if len(matches) != 0 {
		t.Errorf("refused creates left %v", matches)
	}

	v := p.createVolume(t, "small", 16*mib, mountCap(snw))
	_, err = p.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.VolumeId,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * tib}})
	wantRefusal(t, err, codes.OutOfRange, "expand past the max", v.VolumeId, "max_volume_size")

	resp, err := p.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{})
	if err != nil {
		t.Fatal(err)
	}
	disk, err := statFS(p.srv.cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	// The disk's free space moves with whatever else runs: allow 1GiB.
	if d := resp.GetAvailableCapacity() - disk.availBytes; d > gib || d < -gib {
		t.Errorf("available capacity %d, the filesystem has %d bytes free", resp.GetAvailableCapacity(), disk.availBytes)
	}
	if got, want := resp.GetMaximumVolumeSize().GetValue(), min(resp.GetAvailableCapacity(), tib); got != want {
		t.Errorf("maximum volume size %d, want %d (the available capacity, at most 1TiB)", got, want)
	}
}

// A configured MaxVolumeSize is the limit, and a size up to it passes.
func TestConfiguredMaxVolumeSize(t *testing.T) {
	p := startPlugin(t, Config{NodeID: "n1", StateDir: t.TempDir(), MaxVolumeSize: 64 * mib})
	ctx := testCtx(t)
	p.createVolume(t, "at-max", 64*mib, blockCap(snw))
	_, err := p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "over", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 64*mib + 1}})
	wantRefusal(t, err, codes.OutOfRange, "create over the max", `"over"`, "67108864 bytes (64MiB")
	if got := p.maxVolumeSize(t); got != 64*mib {
		t.Errorf("maximum volume size %d, want %d", got, 64*mib)
	}
}

func (p *plugin) maxVolumeSize(t *testing.T) int64 {
	t.Helper()
	resp, err := p.ctrl.GetCapacity(testCtx(t), &csi.GetCapacityRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetMaximumVolumeSize().GetValue()
}

// A volume the filesystem has no room for is ResourceExhausted, naming the
// volume and what is free, with or without a configured capacity; the
// capacity and the largest volume GetCapacity reports are what the disk
// has free when that is less.
func TestVolumeLargerThanTheDiskIsResourceExhausted(t *testing.T) {
	for _, capacity := range []int64{0, 100 * mib} {
		cfg := Config{NodeID: "n1", StateDir: t.TempDir(), Capacity: capacity}
		rc, err := cfg.validateServices()
		if err != nil {
			t.Fatal(err)
		}
		svc, err := newServices(rc)
		if err != nil {
			t.Fatal(err)
		}
		defer svc.Close()
		c := svc.ctrl
		c.diskFree = func() (int64, error) { return 10 * mib, nil }
		ctx := testCtx(t)
		_, err = c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "big", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 20 * mib}})
		wantRefusal(t, err, codes.ResourceExhausted, "create larger than the disk", `"big"`, "10485760 bytes (10MiB) free")
		caps, err := c.GetCapacity(ctx, &csi.GetCapacityRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if caps.GetAvailableCapacity() != 10*mib || caps.GetMaximumVolumeSize().GetValue() != 10*mib {
			t.Errorf("capacity %d: GetCapacity %v, want 10MiB available and as the largest volume", capacity, caps)
		}
		if _, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "fits", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}}); err != nil {
			t.Errorf("capacity %d: a volume that fits: %v", capacity, err)
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{
		512: "512B", 1 << 10: "1KiB", 1536 << 20: "1.5GiB", 100 * tib: "100TiB", math.MaxInt64: "8EiB", 75e9: "69.8GiB",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
