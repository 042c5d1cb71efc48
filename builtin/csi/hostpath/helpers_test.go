//go:build linux

package hostpath

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// testLogger routes plugin logs to t.Log, shown when the test fails or -v.
func testLogger(t testing.TB, level hclog.Level) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: level, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// plugin is a running plugin and clients for its services.
type plugin struct {
	srv   *Server
	conn  *grpc.ClientConn
	ctrl  csi.ControllerClient
	node  csi.NodeClient
	ident csi.IdentityClient
	group csi.GroupControllerClient
}

// startPlugin starts a plugin with cfg (Endpoint defaults to a socket in a
// temp dir, Logger to t.Log) and stops it when the test ends.
func startPlugin(t *testing.T, cfg Config) *plugin {
	t.Helper()
	if cfg.Endpoint == "" {
		cfg.Endpoint = filepath.Join(t.TempDir(), "csi.sock")
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t, hclog.Debug)
	}
	srv, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start plugin: %v", err)
	}
	conn, err := grpc.NewClient(srv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	p := &plugin{srv: srv, conn: conn, ctrl: csi.NewControllerClient(conn), node: csi.NewNodeClient(conn),
		ident: csi.NewIdentityClient(conn), group: csi.NewGroupControllerClient(conn)}
	t.Cleanup(p.stop)
	return p
}

func (p *plugin) stop() {
	p.conn.Close()
	p.srv.Stop()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails the test unless err carries code.
func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("%s: got code %v (%v), want %v", what, got, err, code)
	}
}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
	}
}

func blockCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
}

const (
	snw  = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	snro = csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	snsw = csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	snmw = csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
	mnro = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	mnsw = csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER
	mnmw = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
)

// createVolume creates a volume of size bytes with one capability.
func (p *plugin) createVolume(t *testing.T, name string, size int64, c *csi.VolumeCapability) *csi.Volume {
	t.Helper()
	resp, err := p.ctrl.CreateVolume(testCtx(t), &csi.CreateVolumeRequest{
		Name: name, VolumeCapabilities: []*csi.VolumeCapability{c},
		CapacityRange: &csi.CapacityRange{RequiredBytes: size},
	})
	if err != nil {
		t.Fatalf("create volume %q: %v", name, err)
	}
	return resp.GetVolume()
}

func (p *plugin) available(t *testing.T) int64 {
	t.Helper()
	resp, err := p.ctrl.GetCapacity(testCtx(t), &csi.GetCapacityRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetAvailableCapacity()
}
