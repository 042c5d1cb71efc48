package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/wrapperspb"

	builtinadapters "berth.dev/berth/builtin/csi/adapters"
	"berth.dev/berth/builtin/csi/hostpath"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/sdk"
)

// This test binary stands in for berth: re-executed with `builtin
// csi-adapter NAME` it serves a built-in storage adapter.
// With `fake-adapter NAME` it serves fakeAdapter under NAME, as a
// third-party adapter written against sdk/ alone.
func TestMain(m *testing.M) {
	builtinadapters.MainIfRequested(os.Args)
	if len(os.Args) == 3 && os.Args[1] == "fake-adapter" {
		env, err := sdk.StorageAdapterEnv()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		f := &fakeAdapter{}
		if err := json.Unmarshal(env.Config, &f.cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := sdk.ServeStorageAdapter(sdk.StorageAdapter{Name: os.Args[2], Identity: f, Node: f}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeAdapter is a minimal identity + node plugin. Its config (the plugin
// block's, through the environment) can make it start slowly.
type fakeAdapter struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	cfg struct {
		// ReadyAfter is how many Probes answer "not ready" first.
		ReadyAfter int64 `json:"ready_after"`
	}
	probes atomic.Int64
}

func (*fakeAdapter) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: "fake.csi.berth.dev", VendorVersion: "0.1"}, nil
}

func (f *fakeAdapter) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	ready := f.probes.Add(1) > f.cfg.ReadyAfter
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(ready)}, nil
}

// generous bounds waits for things that take milliseconds, so a loaded
// machine (-race, -count=20, other helpers) does not fail the tests.
const generous = 60 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	t.Cleanup(cancel)
	return ctx
}

// env is one client: a data dir and its state DB, which a restarted
// client (a second manager) opens again.
type env struct {
	t       *testing.T
	dataDir string
	db      *state.DB
	logger  hclog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	db, err := state.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &env{t: t, dataDir: dir, db: db, logger: testutil.Logger(t)}
}

// catalog is the dev catalog of this test binary: the built-in hostpath
// adapter, plus pluginDir's csi/ executables.
func (e *env) catalog(pluginDir string, plugins ...PluginConfig) []Adapter {
	e.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		e.t.Fatal(err)
	}
	out, err := Catalog(CatalogConfig{Executable: exe, Builtins: builtinadapters.Plugins(), Dev: true, PluginDir: pluginDir, Plugins: plugins})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// newManager creates a manager with fast backoff and probes; it is shut
// down when the test ends.
func (e *env) newManager(catalog []Adapter, tweak func(*Config)) *Manager {
	e.t.Helper()
	cfg := Config{
		Adapters: catalog, Store: e.db, NodeID: "node-1", NodeName: "n1", DataDir: e.dataDir,
		Options: pluginsup.Options{Logger: e.logger,
			StartTimeout: generous, Backoff: backoff.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}},
		HealthInterval: time.Second, ProbeStart: 10 * time.Millisecond,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

// events subscribes to m and returns a function that returns the next
// event of adapter name, failing the test once generous has passed since
// the subscription (so a loop over events cannot run forever).
func events(t *testing.T, m *Manager, name string) func() Event {
	ch, cancel := m.Subscribe()
	t.Cleanup(cancel)
	timeout := time.After(generous)
	return func() Event {
		t.Helper()
		for {
			select {
			case ev := <-ch:
				if ev.Adapter == name {
					return ev
				}
			case <-timeout:
				t.Fatalf("no event of adapter %q", name)
			}
		}
	}
}

// expect reads events until one of kind comes, failing on an event of a
// kind that must not come first.
func expect(t *testing.T, next func() Event, kind EventKind, notBefore ...EventKind) Event {
	t.Helper()
	for {
		ev := next()
		if ev.Kind == kind {
			return ev
		}
		for _, k := range notBefore {
			if ev.Kind == k {
				t.Fatalf("event %s (%s) before %s", ev.Kind, ev.Reason, kind)
			}
		}
	}
}

// checkCSI calls the adapter through h's connection and checks that it is
// the hostpath plugin of this node.
func checkCSI(ctx context.Context, t *testing.T, h *Handle, nodeID string) {
	t.Helper()
	id := csipb.NewIdentityClient(h.Conn())
	if _, err := id.Probe(ctx, &csipb.ProbeRequest{}); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	info, err := id.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil || info.GetName() != hostpath.PluginName {
		t.Fatalf("GetPluginInfo = %v, %v; want %s", info, err, hostpath.PluginName)
	}
	ni, err := csipb.NewNodeClient(h.Conn()).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil || ni.GetNodeId() != nodeID {
		t.Fatalf("NodeGetInfo = %v, %v; want node %q", ni, err, nodeID)
	}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func waitGone(t *testing.T, pid int) {
	t.Helper()
	testutil.WaitFor(t, generous, func() error {
		if alive(pid) {
			return fmt.Errorf("process %d still running", pid)
		}
		return nil
	})
}

func mustHandle(t *testing.T, m *Manager, name string) *Handle {
	t.Helper()
	h, err := m.Adapter(name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

var errNotHealthy = errors.New("not healthy")

func waitHealthy(t *testing.T, h *Handle) State {
	t.Helper()
	var st State
	testutil.WaitFor(t, generous, func() error {
		if st = h.State(); !st.Healthy {
			return fmt.Errorf("%w: %+v", errNotHealthy, st)
		}
		return nil
	})
	return st
}
