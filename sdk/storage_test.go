package sdk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/sdk/storagepb"
)

// serveStorageEnv makes this test binary serve fakeStorage as a storage
// adapter, configured through the environment as berth configures one.
const serveStorageEnv = "BERTH_SDK_TEST_SERVE_STORAGE"

// fakeStorage is a minimal identity + node CSI plugin. Its node ID and
// vendor version come from StorageAdapterEnv, so tests see that the
// environment reached the adapter.
type fakeStorage struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	env StorageEnv
}

func (f *fakeStorage) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: "fake.csi.berth.dev", VendorVersion: string(f.env.Config)}, nil
}

func (f *fakeStorage) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{}, nil
}

func (f *fakeStorage) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{}, nil
}

func (f *fakeStorage) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: f.env.NodeID, MaxVolumesPerNode: 3}, nil
}

var (
	_ csipb.IdentityServer = (*fakeStorage)(nil)
	_ csipb.NodeServer     = (*fakeStorage)(nil)
)

func serveFakeStorage() int {
	env, err := StorageAdapterEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f := &fakeStorage{env: env}
	if err := ServeStorageAdapter(StorageAdapter{Name: "fake", Identity: f, Node: f}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func fakeStorageCmd() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveStorageEnv+"=1",
		EnvStorageConfig+`={"size":1}`, EnvStorageNodeID+"=node-7")
	return cmd
}

// callFake checks that the CSI services answer on c's connection.
func callFake(ctx context.Context, t *testing.T, c *StorageClient) {
	t.Helper()
	id := csipb.NewIdentityClient(c.Conn())
	if _, err := id.Probe(ctx, &csipb.ProbeRequest{}); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	info, err := id.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil || info.GetName() != "fake.csi.berth.dev" {
		t.Fatalf("GetPluginInfo = %v, %v", info, err)
	}
	ni, err := csipb.NewNodeClient(c.Conn()).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil || ni.GetNodeId() != "node-7" || ni.GetMaxVolumesPerNode() != 3 {
		t.Fatalf("NodeGetInfo = %v, %v", ni, err)
	}
	// The adapter serves no controller: the call reaches the plugin and is
	// refused by gRPC itself.
	_, err = csipb.NewControllerClient(c.Conn()).ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("ControllerGetCapabilities on a node-only adapter = %v, want Unimplemented", err)
	}
}

func TestStorageAdapterOverGoPlugin(t *testing.T) {
	ctx := testCtx(t)
	p, err := LaunchStorageAdapter(ctx, LaunchConfig{Name: "fake", Cmd: fakeStorageCmd(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	c := p.Adapter()
	if c.Name() != "fake" || c.APIVersion() != StorageAPIVersion || p.Pid() <= 0 {
		t.Errorf("launched %q v%d pid %d", c.Name(), c.APIVersion(), p.Pid())
	}
	callFake(ctx, t, c)
	info, err := csipb.NewIdentityClient(c.Conn()).GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil || info.GetVendorVersion() != `{"size":1}` {
		t.Errorf("the adapter's config did not reach it: %v, %v", info, err)
	}

	ra, ok := p.Reattach()
	if !ok || ra.Pid != p.Pid() || ra.Network != "unix" {
		t.Fatalf("Reattach = %+v, %v", ra, ok)
	}
	// No test logger: go-plugin logs the exit it notices after the test ends.
	again, err := LaunchStorageAdapter(ctx, LaunchConfig{Name: "fake", Reattach: &ra})
	if err != nil {
		t.Fatalf("reattach: %v", err)
	}
	if again.Pid() != p.Pid() {
		t.Errorf("reattached to pid %d, want %d", again.Pid(), p.Pid())
	}
	callFake(ctx, t, again.Adapter())

	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(time.Minute):
		t.Fatal("Done not closed after the adapter was killed")
	}
	if !p.Exited() {
		t.Error("Exited = false after Done")
	}
}

// A driver binary launched as a storage adapter fails the handshake rather
// than dispensing the wrong plugin.
func TestLaunchStorageAdapterRefusesADriver(t *testing.T) {
	ctx := testCtx(t)
	_, err := LaunchStorageAdapter(ctx, LaunchConfig{Name: "fake", Cmd: fakePluginCmd(), StartTimeout: 5 * time.Second})
	if err == nil {
		t.Fatal("a driver plugin was launched as a storage adapter")
	}
	if _, err := LaunchStorageAdapter(ctx, LaunchConfig{Name: "x"}); err == nil {
		t.Error("LaunchStorageAdapter without Cmd or Reattach succeeded")
	}
}

func TestServeStorageAdapterChecks(t *testing.T) {
	f := &fakeStorage{}
	for _, a := range []StorageAdapter{
		{Identity: f, Node: f},
		{Name: "x", Node: f},
		{Name: "x", Identity: f},
	} {
		if err := ServeStorageAdapter(a); err == nil || errors.Is(err, ErrNotAdapterProcess) {
			t.Errorf("ServeStorageAdapter(%+v) = %v, want a config error", a, err)
		}
	}
	t.Setenv(StorageHandshake.MagicCookieKey, "")
	if err := ServeStorageAdapter(StorageAdapter{Name: "x", Identity: f, Node: f}); !errors.Is(err, ErrNotAdapterProcess) {
		t.Errorf("ServeStorageAdapter outside berth = %v, want ErrNotAdapterProcess", err)
	}
	if _, err := StorageAdapterEnv(); !errors.Is(err, ErrNotAdapterProcess) {
		t.Errorf("StorageAdapterEnv outside berth = %v, want ErrNotAdapterProcess", err)
	}
}

func TestStorageAdapterInProcess(t *testing.T) {
	ctx := testCtx(t)
	f := &fakeStorage{env: StorageEnv{NodeID: "node-7"}}
	client, _ := plugin.TestPluginGRPCConn(t, true, StoragePluginSet(StorageAdapter{Name: "fake", Identity: f, Node: f}))
	defer client.Close()
	c, err := DispenseStorageAdapter(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	callFake(ctx, t, c)
}

func TestStorageAPIVersionPick(t *testing.T) {
	if v, ok := pickStorageAPIVersion([]uint32{StorageAPIVersion + 5, StorageAPIVersion}); !ok || v != StorageAPIVersion {
		t.Errorf("pick = %d, %v", v, ok)
	}
	if _, ok := pickStorageAPIVersion([]uint32{StorageAPIVersion + 1}); ok {
		t.Error("picked a version this sdk does not speak")
	}
	s := &storageServer{name: "x"}
	_, err := s.Negotiate(context.Background(), &storagepb.NegotiateRequest{ApiVersions: []uint32{99}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Negotiate(99) = %v, want FailedPrecondition", err)
	}
}
