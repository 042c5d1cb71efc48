package taskdrivers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

func TestBuiltinDriversRunAsPluginSubprocesses(t *testing.T) {
	tmp := privateTempDir(t)
	e := newEnv(t)
	m := e.newManager(e.catalog(rawExecEnabled), nil)
	e.start(m)

	infos := m.DriverInfos()
	// exec is built in too, and stays undetected until enabled.
	if len(infos) != 3 || infos["exec"].GetDetected() {
		t.Fatalf("drivers %v, want mock, raw_exec and an undetected exec", infos)
	}
	for _, name := range []string{"mock", "raw_exec"} {
		i := infos[name]
		if !i.GetHealthy() || !i.GetDetected() || !i.GetBuiltin() || i.GetPath() != "" || i.GetVersion() != version.Version ||
			i.GetAttributes()["driver."+name] != "true" || i.GetUpdatedAt() == 0 {
			t.Fatalf("%s: %v", name, i)
		}
		pid := pluginPid(m, name)
		if pid == os.Getpid() || !alive(pid) {
			t.Fatalf("%s: plugin pid %d is not a live subprocess", name, pid)
		}
	}
	if pluginPid(m, "mock") == pluginPid(m, "raw_exec") {
		t.Fatal("both drivers in one process")
	}

	// The plugins really are reachable: run a mock task to its exit code.
	d := driver(t, m, "mock")
	cfg := &driverpb.TaskConfig{Id: "m1", Name: "web", DriverConfig: sdk.ConfigMap{"run_for": sdk.StringValue("10ms"), "exit_code": sdk.IntValue(3)}}
	if _, err := d.StartTask(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	res, err := d.WaitTask(ctxT(t), "m1")
	if err != nil || res.GetExitCode() != 3 {
		t.Fatalf("WaitTask: %v, %v", res, err)
	}
	spec, err := d.TaskConfigSpec(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := spec.Validate(sdk.ConfigMap{"run_fur": sdk.StringValue("1s")}); !errors.Is(err, sdk.ErrInvalidConfig) {
		t.Fatalf("task config validation through the plugin's schema: %v", err)
	}

	// Shutdown stops the plugin processes and forgets their reattach records.
	rawPid, mockPid := pluginPid(m, "raw_exec"), pluginPid(m, "mock")
	if recs, _ := e.db.DriverPlugins(); len(recs) != 3 {
		t.Fatalf("reattach records while running (exec, mock, raw_exec): %v", recs)
	}
	if err := m.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if alive(rawPid) || alive(mockPid) {
		t.Fatalf("plugins still running after Shutdown: raw_exec %t, mock %t", alive(rawPid), alive(mockPid))
	}
	if recs, _ := e.db.DriverPlugins(); len(recs) != 0 {
		t.Fatalf("reattach records after Shutdown: %v", recs)
	}
	if left := socketDirs(t, tmp); len(left) != 0 {
		t.Fatalf("plugin socket directories left after Shutdown: %v", left)
	}
	if _, err := d.StartTask(ctxT(t), &driverpb.TaskConfig{Id: "m2"}); !errors.Is(err, ErrShutdown) {
		t.Fatalf("StartTask after Shutdown: %v", err)
	}
}

func TestRawExecIsUndetectedUntilEnabled(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(), nil)
	e.start(m)
	i := m.DriverInfos()["raw_exec"]
	if i.GetDetected() || i.GetHealthy() || !strings.Contains(i.GetHealthDescription(), "enabled = true") {
		t.Fatalf("raw_exec without config: %v", i)
	}
	cfg, _ := gatedTask(t, "r1", 0)
	_, err := driver(t, m, "raw_exec").StartTask(ctxT(t), cfg)
	wantErr(t, err, sdk.ErrDriverUnhealthy)
}

func TestPluginConfigErrorsNameDriverKeyAndSource(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(
		PluginConfig{Name: "raw_exec", JSON: []byte(`{"enabld": true}`), Source: "/etc/berth/agent.hcl:7"},
		PluginConfig{Name: "mock", JSON: []byte(`{"unhealthy_after": "soon"}`), Source: "/etc/berth/agent.hcl:12"},
	), nil)
	err := m.Start(ctxT(t))
	wantErr(t, err, sdk.ErrInvalidConfig)
	for _, want := range []struct{ driver, key, source string }{
		{"raw_exec", "enabld", "/etc/berth/agent.hcl:7"},
		{"mock", "unhealthy_after", "/etc/berth/agent.hcl:12"},
	} {
		var found bool
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var pe *PluginError
			var ce *sdk.ConfigError
			if errors.As(e, &pe) && pe.Name == want.driver {
				found = true
				if pe.Source != want.source || !errors.As(e, &ce) || ce.Key != want.key || ce.Plugin != want.driver {
					t.Fatalf("%s: %v", want.driver, e)
				}
				if msg := e.Error(); !strings.Contains(msg, want.source) || !strings.Contains(msg, `"`+want.key+`"`) {
					t.Fatalf("message %q does not name %s and key %q", msg, want.source, want.key)
				}
			}
		}
		if !found {
			t.Fatalf("no error about %s in %v", want.driver, err)
		}
		i := m.DriverInfos()[want.driver]
		if i.GetHealthy() || !strings.Contains(i.GetHealthDescription(), want.source) || !strings.Contains(i.GetHealthDescription(), want.key) {
			t.Fatalf("%s health: %v", want.driver, i)
		}
	}
	// A config error is not retried: the plugin is not running, and calls
	// fail at once, waiting or not, with ErrDriverFailed: not
	// ErrDriverUnavailable, whose Unavailable would tell callers to retry.
	if pid := pluginPid(m, "raw_exec"); pid != 0 {
		t.Fatalf("raw_exec plugin running (pid %d) with an invalid config", pid)
	}
	_, err = driver(t, m, "raw_exec").WaitTask(ctxT(t), "t1")
	wantErr(t, err, ErrDriverFailed, sdk.ErrInvalidConfig)
	_, err = driver(t, m, "raw_exec").StartTask(ctxT(t), &driverpb.TaskConfig{Id: "t1"})
	wantErr(t, err, ErrDriverFailed, sdk.ErrInvalidConfig)
	if errors.Is(err, ErrDriverUnavailable) || errcode.Code(err) != codes.FailedPrecondition {
		t.Fatalf("StartTask on a driver with an invalid config = %v, code %s; want ErrDriverFailed alone, FailedPrecondition", err, errcode.Code(err))
	}
}

// TestBrokenPluginsAreReportedAndOthersRun covers every way a plugin can
// fail to come up: each is an unhealthy driver with a clear description,
// retried, and the healthy drivers are unaffected.
func TestBrokenPluginsAreReportedAndOthersRun(t *testing.T) {
	tmp := privateTempDir(t)
	e := newEnv(t)
	e.script("noexec", "exit 0", 0o644)
	e.script("crashy", `echo "fatal: cannot open /dev/kvm: no such device" >&2; exit 3`, 0o755)
	e.fake("wrongproto", "wrongproto", "wrongproto")
	e.fake("wrongapi", "wrongapi", "wrongapi")
	e.fake("misnamed", "thirdparty", "somethingelse")
	plugins := e.catalog(PluginConfig{Name: "ghost", Source: "agent.hcl:3"})
	m := e.newManager(plugins, nil)
	e.start(m)

	if i := m.DriverInfos()["mock"]; !i.GetHealthy() {
		t.Fatalf("mock: %v", i)
	}
	// code is what StartTask's caller (and so the API) sees: Unavailable
	// only where trying again may work; a plugin that cannot work until an
	// operator replaces or fixes it has the code of what is wrong, not the
	// "retry" of ErrPluginStart or ErrDriverUnavailable.
	for _, tc := range []struct {
		name     string
		err      error
		detected bool
		says     []string
		code     codes.Code
	}{
		{"ghost", ErrPluginMissing, false, []string{"agent.hcl:3", "not a built-in driver"}, codes.NotFound},
		{"noexec", ErrPluginNotExecutable, false, []string{"chmod +x"}, codes.FailedPrecondition},
		{"crashy", ErrPluginStart, true, []string{"exited with status 3", "fatal: cannot open /dev/kvm"}, codes.Unavailable},
		{"wrongproto", ErrPluginStart, true, []string{"Plugin version: 2"}, codes.Unavailable},
		{"wrongapi", sdk.ErrIncompatibleAPI, true, []string{"API version"}, codes.FailedPrecondition},
		{"misnamed", ErrPluginName, true, []string{`"somethingelse"`}, codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := info(t, m, tc.name, func(i *pb.DriverInfo) bool {
				// Retried: a later attempt than the first is reported.
				m := attemptRE.FindStringSubmatch(i.GetHealthDescription())
				if m == nil {
					return false
				}
				n, _ := strconv.Atoi(m[1])
				return n >= 2
			})
			if i.GetHealthy() || i.GetDetected() != tc.detected || i.GetBuiltin() {
				t.Fatalf("info %v", i)
			}
			for _, s := range tc.says {
				if !strings.Contains(i.GetHealthDescription(), s) {
					t.Fatalf("description %q does not say %q", i.GetHealthDescription(), s)
				}
			}
			_, err := driver(t, m, tc.name).StartTask(ctxT(t), &driverpb.TaskConfig{Id: "t-" + tc.name})
			wantErr(t, err, ErrDriverUnavailable, tc.err)
			if got := errcode.Code(err); got != tc.code {
				t.Errorf("StartTask error %v: code %s, want %s", err, got, tc.code)
			}
			if tc.name == "wrongapi" && !errors.Is(err, ErrPluginStart) {
				t.Errorf("StartTask error %v does not say the plugin failed to start", err)
			}
			var pe *PluginError
			if !errors.As(err, &pe) || pe.Name != tc.name {
				t.Fatalf("StartTask error %v names no driver", err)
			}
		})
	}
	if i := m.DriverInfos()["mock"]; !i.GetHealthy() {
		t.Fatalf("mock after the others failed: %v", i)
	}
	// Failed starts leave no sockets behind; only the running mock has one.
	if err := m.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if left := socketDirs(t, tmp); len(left) != 0 {
		t.Fatalf("plugin socket directories left: %v", left)
	}
}

var attemptRE = regexp.MustCompile(`\(attempt (\d+)\)$`)

// TestShutdownDuringPluginHandshake shuts the manager down while a plugin
// has not finished its handshake: Shutdown does not wait for the
// handshake, and the process is still reaped once it ends.
//
// Run with -race, it also catches, in most runs, a read of the process's
// exit status while go-plugin still waits for it (the detector can lose
// track of the reading goroutine once it has ended). For the detector to
// see it at all, no file may be written between Shutdown and the exit:
// under -race a file write followed by any file read orders the
// goroutines. So the catalog holds only this plugin, and a signal ends it.
func TestShutdownDuringPluginHandshake(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	e := newEnv(t)
	path := e.script("slow", fmt.Sprintf(`trap 'exit 3' TERM
echo $$ > %q.tmp && mv %q.tmp %q
while :; do sleep 0.05; done`, pidFile, pidFile, pidFile), 0o755)
	m := e.newManager([]Plugin{{Name: "slow", Path: path}}, nil)
	started := make(chan error, 1)
	go func() { started <- m.Start(ctxT(t)) }()

	var pid int
	testutil.WaitFor(t, generous, func() error {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	t.Cleanup(func() {
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err := m.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatalf("Start: %v", err)
	}
	if !alive(pid) {
		t.Fatalf("plugin pid %d gone before it was signalled: the test did not shut down during its handshake", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, generous, func() error {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("plugin pid %d not reaped (stat: %v)", pid, err)
		}
		return nil
	})
}

func TestMissingPluginIsPickedUpOnceInstalled(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(PluginConfig{Name: "later", Source: "agent.hcl:1"}), nil)
	e.start(m)
	if i := m.DriverInfos()["later"]; i.GetDetected() || i.GetHealthy() {
		t.Fatalf("later before install: %v", i)
	}
	e.fake("later", "thirdparty", "later")
	i := info(t, m, "later", healthy)
	if i.GetVersion() != fakeVersion || i.GetBuiltin() || !strings.HasSuffix(i.GetPath(), "/plugins/later") {
		t.Fatalf("later after install: %v", i)
	}
}

func TestPluginDirDriverRunsTasks(t *testing.T) {
	e := newEnv(t)
	path := e.fake("thirdparty", "thirdparty", "thirdparty")
	m := e.newManager(e.catalog(PluginConfig{Name: "thirdparty", JSON: []byte(`{"attributes": {"gpu": "none"}}`)}), nil)
	e.start(m)
	i := m.DriverInfos()["thirdparty"]
	if !i.GetHealthy() || i.GetBuiltin() || i.GetPath() != path || i.GetVersion() != fakeVersion || i.GetAttributes()["gpu"] != "none" {
		t.Fatalf("thirdparty: %v", i)
	}
	d := driver(t, m, "thirdparty")
	cfg := &driverpb.TaskConfig{Id: "tp1", Name: "web", DriverConfig: sdk.ConfigMap{"run_for": sdk.StringValue("1ms"), "exit_code": sdk.IntValue(9)}}
	if _, err := d.StartTask(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	if res, err := d.WaitTask(ctxT(t), "tp1"); err != nil || res.GetExitCode() != 9 {
		t.Fatalf("WaitTask: %v, %v", res, err)
	}
}

func TestHandlesArePersistedUntilDestroyed(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(), nil)
	e.start(m)
	d := driver(t, m, "mock")
	cfg := &driverpb.TaskConfig{Id: "h1", Name: "web", AllocId: "a1"}
	h, err := d.StartTask(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec, ok, err := e.db.TaskHandle("h1")
	if err != nil || !ok || rec.GetDriver() != "mock" || string(rec.GetHandle().GetDriverState()) != string(h.GetDriverState()) {
		t.Fatalf("persisted handle: %v, %t, %v", rec, ok, err)
	}
	// Task IDs are unique on the node, whichever driver holds them.
	_, err = driver(t, m, "raw_exec").StartTask(ctxT(t), cfg)
	wantErr(t, err, sdk.ErrTaskExists)

	err = d.DestroyTask(ctxT(t), "h1", false)
	wantErr(t, err, sdk.ErrTaskRunning)
	if _, ok, _ := e.db.TaskHandle("h1"); !ok {
		t.Fatal("handle deleted although the destroy was refused")
	}
	if err := d.DestroyTask(ctxT(t), "h1", true); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := e.db.TaskHandle("h1"); ok {
		t.Fatal("handle still persisted after DestroyTask")
	}

	if _, err := m.Driver("nope"); !errors.Is(err, ErrUnknownDriver) {
		t.Fatalf("Driver(nope): %v", err)
	}
	err = d.RecoverTask(ctxT(t), &driverpb.TaskHandle{Driver: "raw_exec", Config: &driverpb.TaskConfig{Id: "x"}})
	wantErr(t, err, sdk.ErrInvalidHandle)
}

func TestFingerprintChangesReachDriverInfosAndChanged(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(PluginConfig{Name: "mock", JSON: []byte(`{"unhealthy_after": "2s"}`)}), nil)
	e.start(m)
	select { // drain what Start caused
	case <-m.Changed():
	default:
	}
	before := m.DriverInfos()["mock"]
	if !before.GetHealthy() {
		t.Fatalf("mock at start: %v", before)
	}
	select {
	case <-m.Changed():
	case <-time.After(generous):
		t.Fatal("no change signalled")
	}
	after := info(t, m, "mock", func(i *pb.DriverInfo) bool { return !i.GetHealthy() })
	if !after.GetDetected() || !strings.Contains(after.GetHealthDescription(), "unhealthy_after") || after.GetUpdatedAt() <= before.GetUpdatedAt() {
		t.Fatalf("mock after turning unhealthy: %v (before %v)", after, before)
	}
}

func TestManagerRefusesToRunInsideAPlugin(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(), nil)
	t.Setenv(sdk.Handshake.MagicCookieKey, sdk.Handshake.MagicCookieValue)
	if err := m.Start(context.Background()); !errors.Is(err, ErrNestedPlugin) {
		t.Fatalf("Start inside a plugin process: %v", err)
	}
}
