package taskdrivers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"berth.dev/berth/builtin/drivers"
	"berth.dev/berth/builtin/drivers/mock"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
)

// This test binary stands in for berth: re-executed with `builtin driver
// NAME` it serves a built-in driver (or runs a raw_exec executor), and
// with fakeEnv set it serves one of the fake third-party plugins below.
func TestMain(m *testing.M) {
	drivers.MainIfRequested(os.Args)
	serveFakeIfRequested()
	runClientIfRequested()
	os.Exit(m.Run())
}

const (
	// fakeEnv selects a fake plugin: "thirdparty" (the mock driver under
	// the name in fakeNameEnv, version fakeVersion), "startlate" (that
	// driver answering StartTask only once its caller gave up, see
	// lateStarter), "destroyhang" (that driver never answering
	// DestroyTask, see hangingDestroyer), "wrongproto" (a plugin
	// speaking go-plugin protocol version 2), "wrongapi" (a plugin that
	// answers Negotiate with driver API version 99) or "apiv1" (the mock
	// driver as a plugin built before mounts: it speaks only driver API
	// version 1, though its capabilities say mount_volumes).
	fakeEnv     = "BERTH_TASKDRIVERS_FAKE"
	fakeNameEnv = "BERTH_TASKDRIVERS_FAKE_NAME"
	// fakeCallsEnv names a file a fake appends a line to for each call it
	// counts ("destroyhang": "DestroyTask <task id>"): the fakes run in
	// their own process, so the file is their call counter.
	fakeCallsEnv = "BERTH_TASKDRIVERS_FAKE_CALLS"
	fakeVersion  = "1.2.3"
)

// renamed is the mock driver under another name, as a third-party plugin.
type renamed struct {
	*mock.Driver
	name string
}

func (r renamed) PluginInfo(context.Context) (*driverpb.PluginInfo, error) {
	return &driverpb.PluginInfo{Name: r.name, Version: fakeVersion}, nil
}

func serveFakeIfRequested() {
	kind := os.Getenv(fakeEnv)
	if kind == "" {
		return
	}
	logger := sdk.NewPluginLogger("fake")
	d := renamed{Driver: mock.New(logger), name: os.Getenv(fakeNameEnv)}
	switch kind {
	case "thirdparty":
		if err := sdk.ServeDriver(d); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "startlate":
		if err := sdk.ServeDriver(lateStarter{d}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "destroyhang":
		if err := sdk.ServeDriver(hangingDestroyer{d}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "startdie":
		if err := sdk.ServeDriver(dyingStarter{d}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "wrongapi":
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig: sdk.Handshake,
			Plugins:         plugin.PluginSet{sdk.PluginTypeDriver: wrongAPIPlugin{name: d.name}},
			GRPCServer:      plugin.DefaultGRPCServer,
			Logger:          logger,
		})
	case "apiv1":
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig: sdk.Handshake,
			Plugins:         sdk.PluginSet(d),
			GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
				return plugin.DefaultGRPCServer(append(opts, grpc.ChainUnaryInterceptor(speakOnlyAPIv1)))
			},
			Logger: logger,
		})
	case "wrongproto":
		hs := sdk.Handshake
		hs.ProtocolVersion++
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig: hs,
			Plugins:         sdk.PluginSet(d),
			GRPCServer:      plugin.DefaultGRPCServer,
			Logger:          logger,
		})
	default:
		fmt.Fprintf(os.Stderr, "unknown fake plugin %q\n", kind)
		os.Exit(2)
	}
	os.Exit(0)
}

// speakOnlyAPIv1 makes a plugin negotiate as one whose sdk speaks only
// driver API version 1: it drops every newer version from the offer.
func speakOnlyAPIv1(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if n, ok := req.(*driverpb.NegotiateRequest); ok && info.FullMethod == driverpb.Driver_Negotiate_FullMethodName {
		var old []uint32
		for _, v := range n.GetApiVersions() {
			if v <= 1 {
				old = append(old, v)
			}
		}
		req = &driverpb.NegotiateRequest{ApiVersions: old}
	}
	return handler(ctx, req)
}

// lateStarter starts the task, then holds its reply until the caller gives
// up: a plugin whose start finishes just as its caller's ctx ends.
type lateStarter struct{ renamed }

func (l lateStarter) StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	h, err := l.Driver.StartTask(context.WithoutCancel(ctx), cfg)
	if err != nil {
		return nil, err
	}
	<-ctx.Done()
	return h, nil
}

// hangingDestroyer never answers DestroyTask, whatever its deadline: a
// plugin stuck tearing a task down.
type hangingDestroyer struct{ renamed }

func (hangingDestroyer) DestroyTask(_ context.Context, id string, _ bool) error {
	if path := os.Getenv(fakeCallsEnv); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, _ = fmt.Fprintf(f, "DestroyTask %s\n", id)
			_ = f.Close()
		}
	}
	select {}
}

// fakeCalls returns the calls a fake recorded in path (see fakeCallsEnv).
func fakeCalls(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// wrongAPIPlugin serves a driver that only speaks driver API version 99.
type wrongAPIPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	name string
}

func (p wrongAPIPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	driverpb.RegisterDriverServer(s, wrongAPIServer{name: p.name})
	return nil
}

func (wrongAPIPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (interface{}, error) {
	return nil, errors.New("wrongapi is served, never dispensed")
}

type wrongAPIServer struct {
	driverpb.UnimplementedDriverServer
	name string
}

func (s wrongAPIServer) Negotiate(context.Context, *driverpb.NegotiateRequest) (*driverpb.NegotiateResponse, error) {
	return &driverpb.NegotiateResponse{ApiVersion: 99, Info: &driverpb.PluginInfo{Name: s.name, Version: "99.0.0"}}, nil
}

// generous bounds what should finish promptly; no test fails for being slow within it.
const generous = 90 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	t.Cleanup(cancel)
	return ctx
}

// env is a client data dir: a state DB and a plugin_dir.
type env struct {
	t         *testing.T
	dataDir   string
	pluginDir string
	db        *state.DB
	logger    hclog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, dataDir: dir, pluginDir: filepath.Join(dir, "plugins"), logger: drivertest.Logger(t)}
	if err := os.Mkdir(e.pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.openDB()
	return e
}

// privateTempDir points os.TempDir, where plugins get their socket
// directories, at a fresh short directory (unix socket paths are limited
// to 108 bytes) and returns it.
func privateTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "td")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Setenv("TMPDIR", dir)
	return dir
}

// socketDirs lists the plugin socket directories left in dir.
func socketDirs(t *testing.T, dir string) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(dir, "berth-driver-*"))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

func (e *env) openDB() {
	e.t.Helper()
	db, err := state.Open(state.Path(e.dataDir))
	if err != nil {
		e.t.Fatal(err)
	}
	e.db = db
	e.t.Cleanup(func() { db.Close() })
}

func testExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// catalog lists the built-in drivers (mock in dev mode), the plugin_dir and configs.
func (e *env) catalog(configs ...PluginConfig) []Plugin {
	e.t.Helper()
	plugins, err := Catalog(CatalogConfig{Executable: testExecutable(e.t), Builtins: drivers.Plugins(), Dev: true, PluginDir: e.pluginDir, Plugins: configs})
	if err != nil {
		e.t.Fatal(err)
	}
	return plugins
}

// rawExecEnabled is the plugin block that turns raw_exec on.
var rawExecEnabled = PluginConfig{Name: "raw_exec", JSON: []byte(`{"enabled": true}`), Source: "agent.hcl:1"}

// newManager creates a manager over plugins with fast backoff; it is shut
// down when the test ends. observed, if not nil, receives every DriverInfo change.
func (e *env) newManager(plugins []Plugin, tweak func(*Config)) *Manager {
	e.t.Helper()
	cfg := Config{
		Plugins: plugins, Store: e.db,
		Options: pluginsup.Options{Logger: e.logger,
			StartTimeout: generous, Backoff: backoff.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}},
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

func (e *env) start(m *Manager) {
	e.t.Helper()
	if err := m.Start(ctxT(e.t)); err != nil {
		e.t.Fatalf("Start: %v", err)
	}
}

// script writes an executable (or not) file into the plugin_dir.
func (e *env) script(name, body string, mode os.FileMode) string {
	e.t.Helper()
	path := filepath.Join(e.pluginDir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), mode); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// fake installs a plugin_dir plugin running this test binary as fake kind
// serving under reportName.
func (e *env) fake(name, kind, reportName string) string {
	e.t.Helper()
	return e.script(name, fmt.Sprintf("%s=%s %s=%s exec %q", fakeEnv, kind, fakeNameEnv, reportName, testExecutable(e.t)), 0o755)
}

// info waits until driver name's DriverInfo satisfies ok and returns it.
func info(t *testing.T, m *Manager, name string, ok func(*pb.DriverInfo) bool) *pb.DriverInfo {
	t.Helper()
	var got *pb.DriverInfo
	testutil.WaitFor(t, generous, func() error {
		got = m.DriverInfos()[name]
		if got == nil || !ok(got) {
			return fmt.Errorf("driver %s: %v", name, got)
		}
		return nil
	})
	return got
}

func healthy(i *pb.DriverInfo) bool { return i.GetHealthy() }

// pluginPid is the pid of the driver's running plugin process, 0 if none.
func pluginPid(m *Manager, name string) int {
	r := m.instances[name].sup.Current()
	if r == nil {
		return 0
	}
	return r.Pid
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	// A zombie (exited, not yet reaped by its parent) counts as dead.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

func driver(t *testing.T, m *Manager, name string) *Driver {
	t.Helper()
	d, err := m.Driver(name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// gatedTask is a raw_exec task that runs until the returned file exists,
// then exits with code.
func gatedTask(t *testing.T, id string, code int) (*driverpb.TaskConfig, string) {
	return gatedTaskIn(t.TempDir(), id, code)
}

func gatedTaskIn(dir, id string, code int) (*driverpb.TaskConfig, string) {
	release := filepath.Join(dir, "release")
	return &driverpb.TaskConfig{
		Id: id, Name: "web", AllocId: "alloc-1", TaskDir: dir, LogDir: filepath.Join(dir, "logs"),
		Env: map[string]string{"PATH": "/usr/bin:/bin", "RELEASE": release},
		DriverConfig: sdk.ConfigMap{
			"command": sdk.StringValue("/bin/sh"),
			"args":    sdk.ListValue("-c", fmt.Sprintf(`while [ ! -e "$RELEASE" ]; do sleep 0.05; done; exit %d`, code)),
		},
	}, release
}

func release(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// taskPid asks the driver for the task's pid and checks that it runs.
func taskPid(t *testing.T, d *Driver, id string) int {
	t.Helper()
	st, err := d.InspectTask(ctxT(t), id)
	if err != nil {
		t.Fatalf("InspectTask(%s): %v", id, err)
	}
	if st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("task %s is %v, want running", id, st.GetState())
	}
	pid, err := strconv.Atoi(st.GetAttributes()["pid"])
	if err != nil || !alive(pid) {
		t.Fatalf("task %s pid %q: not a live process (%v)", id, st.GetAttributes()["pid"], err)
	}
	return pid
}

// killTaskAtEnd kills a task's process group if the test leaves it behind.
func killTaskAtEnd(t *testing.T, pid int) {
	t.Cleanup(func() {
		if alive(pid) {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
}

func wantErr(t *testing.T, err error, targets ...error) {
	t.Helper()
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("error %v\nis not %v", err, target)
		}
	}
}
