package csi_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
)

// testLogger routes a logger to t.Log, so logs show only for failed tests.
func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Trace, Output: tWriter{t}})
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// captureLogger is a trace-level logger whose output the test can read, and
// which also goes to t.Log.
type captureLogger struct {
	mu  sync.Mutex
	buf bytes.Buffer
	t   testing.TB
}

func (c *captureLogger) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.buf.Write(p)
	c.mu.Unlock()
	c.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (c *captureLogger) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func newCaptureLogger(t testing.TB) (*captureLogger, hclog.Logger) {
	c := &captureLogger{t: t}
	return c, hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: c})
}

// socketDir returns a short temporary directory: t.TempDir embeds the test
// name and can overflow the 107 bytes a socket path may have.
func socketDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startFake serves a new fake plugin and dials it.
func startFake(t testing.TB, opts ...csi.Option) (*csifake.Plugin, *csifake.Server, *csi.Client) {
	t.Helper()
	p := csifake.New()
	srv, err := p.Listen(filepath.Join(socketDir(t), "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	c, err := csi.Dial(srv.Endpoint, append([]csi.Option{csi.WithLogger(testLogger(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, srv, c
}

// testCtx bounds a test that could hang if the code under test were broken;
// it is generous because the machine's speed varies widely.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mountCap(fs string, mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fs}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

var rwCap = mountCap("ext4", csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)

// callCase is one client call, with how to script and inspect the fake's
// side of it.
type callCase struct {
	call   csi.Call
	volume string // the VolumeID errors must carry
	fail   func(error)
	block  func() (release func())
	count  func() int
	do     func(context.Context, *csi.Client) error
}

func mkCase[Q, S any](call csi.Call, volume string, fc *csifake.Call[Q, S], do func(context.Context, *csi.Client) error) callCase {
	return callCase{
		call:   call,
		volume: volume,
		fail:   func(err error) { fc.Next(nil, err) },
		block:  fc.Block,
		count:  fc.Count,
		do:     do,
	}
}

// allCalls lists every call the client makes, each with a valid request,
// scripted through p.
func allCalls(p *csifake.Plugin) []callCase {
	type C = csi.Client
	type X = context.Context
	return []callCase{
		mkCase(csi.CallGetPluginInfo, "", &p.GetPluginInfo, func(ctx X, c *C) error { _, err := c.Identity.GetPluginInfo(ctx); return err }),
		mkCase(csi.CallGetPluginCapabilities, "", &p.GetPluginCapabilities, func(ctx X, c *C) error { _, err := c.Identity.GetPluginCapabilities(ctx); return err }),
		mkCase(csi.CallProbe, "", &p.Probe, func(ctx X, c *C) error { _, err := c.Identity.Probe(ctx); return err }),
		mkCase(csi.CallCreateVolume, "v1", &p.CreateVolume, func(ctx X, c *C) error {
			_, err := c.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "v1", VolumeCapabilities: []*csipb.VolumeCapability{rwCap}})
			return err
		}),
		mkCase(csi.CallDeleteVolume, "v1", &p.DeleteVolume, func(ctx X, c *C) error {
			_, err := c.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: "v1"})
			return err
		}),
		mkCase(csi.CallControllerPublishVolume, "v1", &p.ControllerPublishVolume, func(ctx X, c *C) error {
			_, err := c.Controller.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: "v1", NodeId: "n1", VolumeCapability: rwCap})
			return err
		}),
		mkCase(csi.CallControllerUnpublishVolume, "v1", &p.ControllerUnpublishVolume, func(ctx X, c *C) error {
			_, err := c.Controller.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: "v1", NodeId: "n1"})
			return err
		}),
		mkCase(csi.CallValidateVolumeCapabilities, "v1", &p.ValidateVolumeCapabilities, func(ctx X, c *C) error {
			_, err := c.Controller.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: "v1", VolumeCapabilities: []*csipb.VolumeCapability{rwCap}})
			return err
		}),
		mkCase(csi.CallListVolumes, "", &p.ListVolumes, func(ctx X, c *C) error { _, err := c.Controller.ListVolumes(ctx, nil); return err }),
		mkCase(csi.CallGetCapacity, "", &p.GetCapacity, func(ctx X, c *C) error { _, err := c.Controller.GetCapacity(ctx, nil); return err }),
		mkCase(csi.CallControllerGetCapabilities, "", &p.ControllerGetCapabilities, func(ctx X, c *C) error { _, err := c.Controller.ControllerGetCapabilities(ctx); return err }),
		mkCase(csi.CallControllerGetVolume, "v1", &p.ControllerGetVolume, func(ctx X, c *C) error {
			_, err := c.Controller.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: "v1"})
			return err
		}),
		mkCase(csi.CallControllerExpandVolume, "v1", &p.ControllerExpandVolume, func(ctx X, c *C) error {
			_, err := c.Controller.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "v1", CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 30}})
			return err
		}),
		mkCase(csi.CallCreateSnapshot, "v1", &p.CreateSnapshot, func(ctx X, c *C) error {
			_, err := c.Controller.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: "v1", Name: "s1"})
			return err
		}),
		mkCase(csi.CallDeleteSnapshot, "", &p.DeleteSnapshot, func(ctx X, c *C) error {
			_, err := c.Controller.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: "s1"})
			return err
		}),
		mkCase(csi.CallListSnapshots, "", &p.ListSnapshots, func(ctx X, c *C) error { _, err := c.Controller.ListSnapshots(ctx, nil); return err }),
		mkCase(csi.CallNodeStageVolume, "v1", &p.NodeStageVolume, func(ctx X, c *C) error {
			_, err := c.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v1", StagingTargetPath: "/staging/v1", VolumeCapability: rwCap})
			return err
		}),
		mkCase(csi.CallNodeUnstageVolume, "v1", &p.NodeUnstageVolume, func(ctx X, c *C) error {
			_, err := c.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: "v1", StagingTargetPath: "/staging/v1"})
			return err
		}),
		mkCase(csi.CallNodePublishVolume, "v1", &p.NodePublishVolume, func(ctx X, c *C) error {
			_, err := c.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v1", TargetPath: "/publish/a1/v1", VolumeCapability: rwCap})
			return err
		}),
		mkCase(csi.CallNodeUnpublishVolume, "v1", &p.NodeUnpublishVolume, func(ctx X, c *C) error {
			_, err := c.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "v1", TargetPath: "/publish/a1/v1"})
			return err
		}),
		mkCase(csi.CallNodeGetVolumeStats, "v1", &p.NodeGetVolumeStats, func(ctx X, c *C) error {
			_, err := c.Node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "v1", VolumePath: "/publish/a1/v1"})
			return err
		}),
		mkCase(csi.CallNodeExpandVolume, "v1", &p.NodeExpandVolume, func(ctx X, c *C) error {
			_, err := c.Node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: "v1", VolumePath: "/publish/a1/v1"})
			return err
		}),
		mkCase(csi.CallNodeGetCapabilities, "", &p.NodeGetCapabilities, func(ctx X, c *C) error { _, err := c.Node.NodeGetCapabilities(ctx); return err }),
		mkCase(csi.CallNodeGetInfo, "", &p.NodeGetInfo, func(ctx X, c *C) error { _, err := c.Node.NodeGetInfo(ctx); return err }),
	}
}

// undoCalls are the calls for which NotFound means done.
var undoCalls = map[csi.Call]bool{
	csi.CallDeleteVolume:              true,
	csi.CallDeleteSnapshot:            true,
	csi.CallControllerUnpublishVolume: true,
	csi.CallNodeUnstageVolume:         true,
	csi.CallNodeUnpublishVolume:       true,
}
