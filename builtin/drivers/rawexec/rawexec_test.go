package rawexec_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/builtin/drivers/rawexec"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
)

// generous bounds operations that should finish promptly; no test fails
// for being slow within it.
const generous = 60 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	t.Cleanup(cancel)
	return ctx
}

// client is an enabled raw_exec driver over in-process gRPC; its tasks run
// under real executors (this test binary re-executed).
func client(t *testing.T) *sdk.DriverClient {
	d := drivertest.InProcess(t, newDriver(t))
	if err := d.SetConfig(ctxT(t), &driverpb.PluginConfig{Values: enabled}); err != nil {
		t.Fatal(err)
	}
	return d
}

func taskCfg(t *testing.T, id string, cfg sdk.ConfigMap) *driverpb.TaskConfig {
	dir := t.TempDir()
	return &driverpb.TaskConfig{
		Id: id, Name: "web", TaskDir: dir, LogDir: filepath.Join(dir, "logs"),
		Env:          map[string]string{"PATH": "/usr/bin:/bin"},
		DriverConfig: cfg,
	}
}

func start(t *testing.T, d sdk.Driver, cfg *driverpb.TaskConfig) *driverpb.TaskHandle {
	t.Helper()
	h, err := d.StartTask(ctxT(t), cfg)
	if err != nil {
		t.Fatalf("StartTask(%s): %v", cfg.GetId(), err)
	}
	t.Cleanup(func() { d.DestroyTask(context.Background(), cfg.GetId(), true) })
	return h
}

func wait(t *testing.T, d sdk.Driver, id string) *driverpb.ExitResult {
	t.Helper()
	res, err := d.WaitTask(ctxT(t), id)
	if err != nil {
		t.Fatalf("WaitTask(%s): %v", id, err)
	}
	return res
}

// waitFile waits for path to exist.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(generous)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readLog(t *testing.T, cfg *driverpb.TaskConfig, stream string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cfg.GetLogDir(), cfg.GetName()+"."+stream+".0"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestDisabledByDefault(t *testing.T) {
	d := drivertest.InProcess(t, newDriver(t))
	ctx := ctxT(t)
	for fp, err := range d.Fingerprint(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if fp.GetHealth() != driverpb.Health_HEALTH_UNDETECTED || !strings.Contains(fp.GetHealthDescription(), "enabled = true") {
			t.Errorf("unconfigured fingerprint %v, want undetected and how to enable it", fp)
		}
		break
	}
	_, err := d.StartTask(ctx, taskCfg(t, "nope", sh("exit 0")))
	if !errors.Is(err, sdk.ErrDriverUnhealthy) {
		t.Errorf("StartTask while disabled = %v, want ErrDriverUnhealthy", err)
	}
	if err := d.SetConfig(ctx, &driverpb.PluginConfig{Values: enabled}); err != nil {
		t.Fatal(err)
	}
	for fp, err := range d.Fingerprint(ctx) {
		if err != nil || fp.GetHealth() != driverpb.Health_HEALTH_HEALTHY || fp.GetAttributes()["driver.raw_exec"] != "true" {
			t.Errorf("enabled fingerprint %v, %v; want healthy with driver.raw_exec=true", fp, err)
		}
		break
	}
}

func TestArgsEnvAndWorkingDirectory(t *testing.T) {
	d := client(t)
	t.Setenv("BERTH_AGENT_ONLY", "leak")
	cfg := taskCfg(t, "argv", sdk.ConfigMap{
		"command": sdk.StringValue("sh"), // found in the task's PATH
		"args":    sdk.ListValue("-c", `echo "$0|$1|$GREETING|$(pwd)|${BERTH_AGENT_ONLY:-unset}"; echo oops >&2`, "zero", "one two"),
		"cwd":     sdk.StringValue("sub"),
	})
	cfg.Env["GREETING"] = "hello world"
	if err := os.Mkdir(filepath.Join(cfg.GetTaskDir(), "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	start(t, d, cfg)
	if res := wait(t, d, cfg.GetId()); res.GetExitCode() != 0 {
		t.Fatalf("exit %v", res)
	}
	want := "zero|one two|hello world|" + filepath.Join(cfg.GetTaskDir(), "sub") + "|unset\n"
	if got := readLog(t, cfg, "stdout"); got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got := readLog(t, cfg, "stderr"); got != "oops\n" {
		t.Errorf("stderr %q, want %q", got, "oops\n")
	}
}

func TestLogRotation(t *testing.T) {
	d := client(t)
	// 40 lines of 100 bytes = 4000 bytes into 1000-byte files, keep 2.
	cfg := taskCfg(t, "chatty", sh(`i=0; while [ $i -lt 40 ]; do printf '%099d\n' $i; i=$((i+1)); done`))
	cfg.Logs = &driverpb.LogConfig{MaxFiles: 2, MaxFileSizeBytes: 1000}
	start(t, d, cfg)
	if res := wait(t, d, cfg.GetId()); res.GetExitCode() != 0 {
		t.Fatalf("exit %v", res)
	}
	entries, err := os.ReadDir(cfg.GetLogDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "web.stdout.") {
			names = append(names, e.Name())
		}
	}
	if strings.Join(names, ",") != "web.stdout.2,web.stdout.3" {
		t.Fatalf("stdout files %v, want the newest two of four: web.stdout.2, web.stdout.3", names)
	}
	var kept string
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(cfg.GetLogDir(), n))
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 1000 {
			t.Errorf("%s has %d bytes, over the 1000-byte limit", n, len(data))
		}
		kept += string(data)
	}
	if len(kept) != 2000 || !strings.HasSuffix(kept, strings.Repeat("0", 97)+"39\n") || !strings.HasPrefix(kept, strings.Repeat("0", 97)+"20\n") {
		t.Errorf("kept output is not lines 20..39 (%d bytes)", len(kept))
	}
}

func TestStopUsesConfiguredSignalOnWholeGroup(t *testing.T) {
	d := client(t)
	// The shell starts a background child, records its pid, and exits 42
	// on SIGINT (not on SIGTERM, which it ignores).
	cfg := taskCfg(t, "stop-int", sh(`sleep 1000 & echo $! > child.pid; trap 'exit 42' INT; trap '' TERM; touch ready; while :; do sleep 0.05; done`))
	start(t, d, cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))
	data, err := os.ReadFile(filepath.Join(cfg.GetTaskDir(), "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if err := d.StopTask(ctxT(t), cfg.GetId(), generous, "SIGINT"); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, d, cfg.GetId()); res.GetExitCode() != 42 || res.GetSignal() != 0 {
		t.Errorf("stopped with SIGINT: %v, want exit code 42 from the INT trap", res)
	}
	// The background child was in the task's process group: gone too.
	deadline := time.Now().Add(generous)
	for syscall.Kill(child, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("background child %d survived the task's stop", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExitSignalReported(t *testing.T) {
	d := client(t)
	cfg := taskCfg(t, "segv", sh(`kill -USR1 $$`))
	start(t, d, cfg)
	res := wait(t, d, cfg.GetId())
	if res.GetSignal() != int32(syscall.SIGUSR1) || res.GetExitCode() != 128+int32(syscall.SIGUSR1) {
		t.Errorf("exit %v, want signal %d and exit code %d", res, syscall.SIGUSR1, 128+syscall.SIGUSR1)
	}
}

func TestStartErrorsNameTheKey(t *testing.T) {
	d := client(t)
	ctx := ctxT(t)
	for _, c := range []struct {
		cfg *driverpb.TaskConfig
		key string
	}{
		{taskCfg(t, "nocommand", sdk.ConfigMap{"command": sdk.StringValue("")}), "command"},
		{&driverpb.TaskConfig{Id: "notaskdir", DriverConfig: sdk.ConfigMap{"command": sdk.StringValue("true")}}, "task_dir"},
	} {
		_, err := d.StartTask(ctx, c.cfg)
		var ce *sdk.ConfigError
		if !errors.As(err, &ce) || ce.Key != c.key || ce.Plugin != rawexec.Name {
			t.Errorf("StartTask(%s) = %v, want a raw_exec ConfigError for key %q", c.cfg.GetId(), err, c.key)
		}
	}
}

// A task whose program or working directory is not right on this node is
// ErrTaskStartFailed with a *StartError saying why and naming the path, in
// process, over gRPC and across go-plugin (the plugin and its executors
// are real subprocesses); it is not a config error, and no task is left behind.
func TestStartFailuresAreTyped(t *testing.T) {
	p := drivertest.Launch(t, nil)
	if err := p.Driver().SetConfig(ctxT(t), &driverpb.PluginConfig{Values: enabled}); err != nil {
		t.Fatal(err)
	}
	direct := newDriver(t)
	if err := direct.SetConfig(ctxT(t), &driverpb.PluginConfig{Values: enabled}); err != nil {
		t.Fatal(err)
	}
	drivers := map[string]sdk.Driver{"direct": direct, "in-process gRPC": client(t), "go-plugin": p.Driver()}
	files := t.TempDir()
	notExec := filepath.Join(files, "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pathDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(pathDir, "berth-noexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, d := range drivers {
		for _, c := range []struct {
			name       string
			cfg        sdk.ConfigMap
			path       func(*driverpb.TaskConfig) string
			env        string
			wantReason sdk.StartReason
		}{
			{"missing binary", sdk.ConfigMap{"command": sdk.StringValue(filepath.Join(files, "missing"))},
				func(*driverpb.TaskConfig) string { return filepath.Join(files, "missing") }, "", sdk.StartNotFound},
			{"missing relative binary", sdk.ConfigMap{"command": sdk.StringValue("bin/app")},
				func(cfg *driverpb.TaskConfig) string { return filepath.Join(cfg.GetTaskDir(), "bin/app") }, "", sdk.StartNotFound},
			{"command not in PATH", sdk.ConfigMap{"command": sdk.StringValue("berth-no-such-command")},
				func(*driverpb.TaskConfig) string { return "berth-no-such-command" }, "", sdk.StartNotFound},
			{"non-executable file", sdk.ConfigMap{"command": sdk.StringValue(notExec)},
				func(*driverpb.TaskConfig) string { return notExec }, "", sdk.StartPermissionDenied},
			{"non-executable file in PATH", sdk.ConfigMap{"command": sdk.StringValue("berth-noexec")},
				func(*driverpb.TaskConfig) string { return filepath.Join(pathDir, "berth-noexec") }, pathDir, sdk.StartPermissionDenied},
			{"bad working directory", sdk.ConfigMap{"command": sdk.StringValue("true"), "cwd": sdk.StringValue("no/such/dir")},
				func(cfg *driverpb.TaskConfig) string { return filepath.Join(cfg.GetTaskDir(), "no/such/dir") }, "", sdk.StartBadWorkingDir},
			{"working directory is a file", sdk.ConfigMap{"command": sdk.StringValue("true"), "cwd": sdk.StringValue(notExec)},
				func(*driverpb.TaskConfig) string { return notExec }, "", sdk.StartBadWorkingDir},
		} {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				cfg := taskCfg(t, "t", c.cfg)
				if c.env != "" {
					cfg.Env["PATH"] = c.env
				}
				_, err := d.StartTask(ctxT(t), cfg)
				var se *sdk.StartError
				if !errors.Is(err, sdk.ErrTaskStartFailed) || !errors.As(err, &se) {
					t.Fatalf("StartTask = %v, want ErrTaskStartFailed with a *StartError", err)
				}
				if want := c.path(cfg); se.Reason != c.wantReason || se.Path != want || se.Detail == "" {
					t.Errorf("StartError %+v, want reason %s, path %s and a detail", *se, c.wantReason, want)
				}
				if errors.Is(err, sdk.ErrInvalidConfig) || errcode.Code(err) != codes.FailedPrecondition {
					t.Errorf("StartTask = %v: a config error, or not FailedPrecondition", err)
				}
				if _, err := d.InspectTask(ctxT(t), cfg.GetId()); !errors.Is(err, sdk.ErrTaskNotFound) {
					t.Errorf("the task that did not start is known: InspectTask = %v", err)
				}
			})
		}
	}
}

func TestRunAsUser(t *testing.T) {
	testutil.RequireRoot(t, "running a task as another user")
	want, err := exec.Command("id", "-u", "nobody").Output()
	if err != nil {
		testutil.Unavailable(t, "no nobody user to run the task as: %v", err)
	}
	d := client(t)
	cfg := taskCfg(t, "nobody", sh(`id -u`))
	cfg.User = "nobody"
	// The task must be able to enter its directory.
	for dir := cfg.GetTaskDir(); dir != os.TempDir() && dir != "/"; dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	start(t, d, cfg)
	if res := wait(t, d, cfg.GetId()); res.GetExitCode() != 0 {
		t.Fatalf("exit %v", res)
	}
	if got := readLog(t, cfg, "stdout"); got != string(want) {
		t.Errorf("task ran as uid %q, want nobody's %q", got, want)
	}
}

func TestExecTask(t *testing.T) {
	d := client(t)
	ctx := ctxT(t)
	cfg := taskCfg(t, "exec-host", sh(`touch ready; exec sleep 1000`))
	cfg.Env["GREETING"] = "hi"
	start(t, d, cfg)
	res, err := d.ExecTask(ctx, cfg.GetId(), []string{"sh", "-c", `echo "$GREETING $(pwd)"; echo err >&2; exit 3`}, generous)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.GetStdout()), "hi "+cfg.GetTaskDir()+"\n"; got != want {
		t.Errorf("exec stdout %q, want %q", got, want)
	}
	if string(res.GetStderr()) != "err\n" || res.GetExit().GetExitCode() != 3 {
		t.Errorf("exec stderr %q exit %v, want err and 3", res.GetStderr(), res.GetExit())
	}
	res, err = d.ExecTask(ctx, cfg.GetId(), []string{"sleep", "1000"}, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.GetExit().GetSignal() != int32(syscall.SIGKILL) || res.GetExit().GetErr() == "" {
		t.Errorf("timed-out exec: %v, want killed with an error", res.GetExit())
	}
}

func TestTaskStats(t *testing.T) {
	d := client(t)
	cfg := taskCfg(t, "stats", sh(`sleep 1000 & touch ready; wait`))
	start(t, d, cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))
	n := 0
	for u, err := range d.TaskStats(ctxT(t), cfg.GetId(), 100*time.Millisecond) {
		if err != nil {
			t.Fatal(err)
		}
		if u.GetTaskId() != cfg.GetId() || u.GetProcesses() < 2 || u.GetMemoryRssBytes() == 0 {
			t.Errorf("usage %v, want the task's id, at least 2 processes (sh and sleep) and some memory", u)
		}
		if n++; n == 2 {
			break
		}
	}
	if n != 2 {
		t.Errorf("got %d samples, want 2", n)
	}
}

// alive reports whether pid runs (a zombie has ended).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// An exec's background children end with it, and one holding the output
// pipes open does not cost the exit code.
func TestExecTaskKillsBackgroundChildren(t *testing.T) {
	d := client(t)
	ctx := ctxT(t)
	cfg := taskCfg(t, "exec-bg", sh(`exec sleep 1000`))
	start(t, d, cfg)
	script := `sleep 1000 >/dev/null 2>&1 & echo $! > quiet.pid
sleep 1000 & echo $! > holding.pid
echo done; exit 0`
	res, err := d.ExecTask(ctx, cfg.GetId(), []string{"sh", "-c", script}, generous)
	if err != nil {
		t.Fatalf("ExecTask with a child holding its output: %v", err)
	}
	if res.GetExit().GetExitCode() != 0 || res.GetExit().GetSignal() != 0 || res.GetExit().GetErr() != "" || string(res.GetStdout()) != "done\n" {
		t.Errorf("exec result %v stdout %q, want exit 0 and done", res.GetExit(), res.GetStdout())
	}
	for _, name := range []string{"quiet.pid", "holding.pid"} {
		data, err := os.ReadFile(filepath.Join(cfg.GetTaskDir(), name))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(generous)
		for alive(pid) {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("background child %s (pid %d) outlived its exec", name, pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestDoesNotHonourMounts: raw_exec does not isolate, so it does not
// advertise mount_volumes and a task with mounts never reaches it (the sdk
// refuses it; berth refuses it before that) instead of running without them.
func TestDoesNotHonourMounts(t *testing.T) {
	d := client(t)
	caps, err := d.Capabilities(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if caps.GetMountVolumes() || sdk.MountsSupported(d.APIVersion(), caps) {
		t.Fatalf("raw_exec advertises mounts: %v", caps)
	}
	cfg := taskCfg(t, "mounted", sdk.ConfigMap{"command": sdk.StringValue("true")})
	cfg.Mounts = []*driverpb.Mount{{HostPath: t.TempDir(), TaskPath: "/data"}}
	if _, err := d.StartTask(ctxT(t), cfg); !errors.Is(err, sdk.ErrNotSupported) {
		t.Fatalf("StartTask with mounts = %v, want ErrNotSupported", err)
	}
	if _, err := d.InspectTask(ctxT(t), cfg.GetId()); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Errorf("refused task exists: InspectTask = %v", err)
	}
}
