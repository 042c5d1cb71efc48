package ctrdriver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"

	"berth.dev/examples/containerd/ctrdriver"
)

func TestStdoutAndStderrGoToTheTaskLogFiles(t *testing.T) {
	f := newFixture(t)
	cfg := f.task(t, f.image("echo", "to stdout", "to stderr"))
	if out := f.runOutput(t, cfg); out != "to stdout\n" {
		t.Errorf("stdout log %q, want %q", out, "to stdout\n")
	}
	if errOut := logs(t, cfg, "stderr"); errOut != "to stderr\n" {
		t.Errorf("stderr log %q, want %q", errOut, "to stderr\n")
	}
}

// The container's environment is the image's, then the task's (berth's
// directory variables naming their mounts; PATH only when the image sets
// none), then the config's env.
func TestEnvironment(t *testing.T) {
	f := newFixture(t)
	dc := f.image("env")
	dc["env"] = sdk.MapValue(map[string]string{"FROM_CONFIG": "yes", "BERTH_TASK_DIR": "/overridden"})
	cfg := f.task(t, dc)
	cfg.Env["FROM_TASK"] = "also"
	env := lines(f.runOutput(t, cfg))
	for _, want := range []string{"FROM_CONFIG=yes", "FROM_TASK=also", "PATH=/usr/bin:/bin", "BERTH_ALLOC_DIR=/alloc",
		"BERTH_SECRETS_DIR=/secrets", "BERTH_TASK_DIR=/overridden"} {
		if !slices.Contains(env, want) {
			t.Errorf("environment lacks %s:\n%s", want, strings.Join(env, "\n"))
		}
	}
}

// The alloc, local and secrets directories are mounted where the
// environment says.
func TestTaskDirectoriesAreMounted(t *testing.T) {
	f := newFixture(t)
	cfg := f.task(t, f.image("write", "/alloc/data-from-task", "hello"))
	f.runOutput(t, cfg)
	got, err := os.ReadFile(filepath.Join(cfg.GetEnv()["BERTH_ALLOC_DIR"], "data-from-task"))
	if err != nil || string(got) != "hello" {
		t.Errorf("the task's /alloc write is not in the alloc dir: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(cfg.GetEnv()["BERTH_SECRETS_DIR"], "token"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg2 := f.task(t, f.image("cat", "/secrets/token"))
	cfg2.Env["BERTH_SECRETS_DIR"] = cfg.GetEnv()["BERTH_SECRETS_DIR"]
	if out := f.runOutput(t, cfg2); out != "s3cret" {
		t.Errorf("/secrets/token in the task: %q, want s3cret", out)
	}
}

func TestUserWorkingDirAndHostname(t *testing.T) {
	f := newFixture(t)
	dc := f.image("id")
	dc["user"] = sdk.StringValue("nobody")
	dc["working_dir"] = sdk.StringValue("/tmp")
	if out := f.runOutput(t, f.task(t, dc)); out != "65534 65534 /tmp\nweb\n" {
		t.Errorf("id as nobody in /tmp: %q, want %q", out, "65534 65534 /tmp\nweb\n")
	}
	// The task's user applies when the config names none.
	cfg := f.task(t, f.image("id"))
	cfg.User = "1234:5678"
	if out := f.runOutput(t, cfg); !strings.HasPrefix(out, "1234 5678 /\n") {
		t.Errorf("id as the task's user: %q, want 1234 5678 /", out)
	}
}

// entrypoint replaces the image's ENTRYPOINT and its CMD; command and args
// replace CMD.
func TestEntrypointCommandAndArgs(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name string
		dc   sdk.ConfigMap
		code int32
	}{
		{"entrypoint drops the image's CMD", sdk.ConfigMap{"entrypoint": sdk.ListValue("/taskprog", "exit", "3")}, 3},
		{"command and args replace CMD", sdk.ConfigMap{"command": sdk.StringValue("exit"), "args": sdk.ListValue("4")}, 4},
		{"args alone replace CMD", sdk.ConfigMap{"args": sdk.ListValue("exit", "5")}, 5},
	} {
		dc := sdk.ConfigMap{"image": sdk.StringValue(testImage), "load": sdk.StringValue(f.archive)}
		for k, v := range c.dc {
			dc[k] = v
		}
		if res := f.run(t, f.task(t, dc)); res.GetExitCode() != c.code {
			t.Errorf("%s: exit %v, want %d", c.name, res, c.code)
		}
	}
}

func TestReadonlyRootfs(t *testing.T) {
	f := newFixture(t)
	dc := f.image("write", "/file", "x")
	dc["readonly_rootfs"] = sdk.BoolValue(true)
	cfg := f.task(t, dc)
	res := f.run(t, cfg)
	if res.GetExitCode() != 100 || !strings.Contains(logs(t, cfg, "stderr"), "read-only file system") {
		t.Errorf("write to a read-only root: %v, stderr %q; want exit 100, read-only file system", res, logs(t, cfg, "stderr"))
	}
	f.runOutput(t, f.task(t, f.image("write", "/file", "x"))) // writable by default
}

// capEff reads a running task's effective capabilities from the host.
func capEff(t *testing.T, d sdk.Driver, id string) uint64 {
	t.Helper()
	ctx, cancel := testCtx()
	defer cancel()
	st, err := d.InspectTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(filepath.Join("/proc", st.GetAttributes()["pid"], "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range lines(string(status)) {
		if hex, ok := strings.CutPrefix(line, "CapEff:\t"); ok {
			v, err := strconv.ParseUint(hex, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatal("no CapEff in /proc/PID/status")
	return 0
}

func TestCapabilitiesAndPrivileged(t *testing.T) {
	f := newFixture(t)
	const netAdmin, sysAdmin = 1 << 12, 1 << 21
	dc := f.image("run")
	dc["cap_drop"] = sdk.ListValue("all")
	dc["cap_add"] = sdk.ListValue("net_admin")
	cfg := f.task(t, dc)
	ready := readyEnv(cfg)
	f.start(t, cfg)
	waitFile(t, ready)
	if got := capEff(t, f.d, cfg.GetId()); got != netAdmin {
		t.Errorf("cap_drop all + cap_add net_admin: CapEff %#x, want %#x", got, netAdmin)
	}
	dc = f.image("run")
	dc["privileged"] = sdk.BoolValue(true)
	cfg = f.task(t, dc)
	ready = readyEnv(cfg)
	f.start(t, cfg)
	waitFile(t, ready)
	if got := capEff(t, f.d, cfg.GetId()); got&sysAdmin == 0 {
		t.Errorf("privileged: CapEff %#x lacks CAP_SYS_ADMIN", got)
	}
	cfg = f.task(t, f.image("run"))
	ready = readyEnv(cfg)
	f.start(t, cfg)
	waitFile(t, ready)
	if got := capEff(t, f.d, cfg.GetId()); got&sysAdmin != 0 || got == 0 {
		t.Errorf("default: CapEff %#x, want the default set without CAP_SYS_ADMIN", got)
	}
}

func TestHostNetwork(t *testing.T) {
	f := newFixture(t)
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []bool{true, false} {
		dc := f.image("run")
		dc["host_network"] = sdk.BoolValue(host)
		cfg := f.task(t, dc)
		ready := readyEnv(cfg)
		f.start(t, cfg)
		waitFile(t, ready)
		ctx, cancel := testCtx()
		st, err := f.d.InspectTask(ctx, cfg.GetId())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		ns, err := os.Readlink(filepath.Join("/proc", st.GetAttributes()["pid"], "ns", "net"))
		if err != nil {
			t.Fatal(err)
		}
		if (ns == self) != host {
			t.Errorf("host_network %v: task's network namespace %s, the host's %s", host, ns, self)
		}
	}
}

func TestDevices(t *testing.T) {
	f := newFixture(t)
	dc := f.image("cat", "/dev/berth-null")
	dc["devices"] = sdk.ListValue("/dev/null:/dev/berth-null:rw")
	f.runOutput(t, f.task(t, dc))
	if res := f.run(t, f.task(t, f.image("cat", "/dev/berth-null"))); res.GetExitCode() != 100 {
		t.Errorf("without the device, reading it should fail: %v", res)
	}
}

// A task over its memory limit is killed by the kernel and reported as
// exec reports it: oom_killed, SIGKILL, and an "OOM killed" event.
func TestOOMKill(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := testCtx()
	defer cancel()
	events := f.d.TaskEvents(ctx)
	cfg := f.task(t, f.image("oom"))
	cfg.Resources.MemoryBytes = 32 << 20
	res := f.run(t, cfg)
	if !res.GetOomKilled() || res.GetSignal() != int32(syscall.SIGKILL) {
		t.Fatalf("task over its memory limit ended %v, want oom_killed by SIGKILL", res)
	}
	for ev, err := range events {
		if err != nil {
			t.Fatalf(`TaskEvents ended before an "OOM killed" event: %v`, err)
		}
		if ev.GetTaskId() == cfg.GetId() && ev.GetMessage() == "OOM killed" {
			return
		}
	}
	t.Fatalf(`TaskEvents ended without an "OOM killed" event for %s: %v`, cfg.GetId(), ctx.Err())
}

func TestStats(t *testing.T) {
	f := newFixture(t)
	cfg := f.task(t, f.image("run"))
	ready := readyEnv(cfg)
	f.start(t, cfg)
	waitFile(t, ready)
	ctx, cancel := testCtx()
	defer cancel()
	n := 0
	for u, err := range f.d.TaskStats(ctx, cfg.GetId(), 100*time.Millisecond) {
		if err != nil {
			t.Fatalf("TaskStats: %v", err)
		}
		if u.GetMemoryUsageBytes() == 0 || u.GetProcesses() < 1 || u.GetTaskId() != cfg.GetId() {
			t.Errorf("usage %v: want memory in use and a process", u)
		}
		if n++; n == 2 {
			break
		}
	}
	if err := f.d.StopTask(ctx, cfg.GetId(), 10*time.Second, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	for u, err := range f.d.TaskStats(ctx, cfg.GetId(), 100*time.Millisecond) {
		t.Errorf("TaskStats of an exited task yielded %v, %v; want it to end", u, err)
	}
}

// A bidirectional mount's propagation reaches the host: a mount the
// (privileged) container makes under it appears on the host, and the
// container's root is rshared for it.
func TestBidirectionalMountReachesTheHost(t *testing.T) {
	f := newFixture(t)
	host := t.TempDir()
	if err := os.Mkdir(filepath.Join(host, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(filepath.Join(host, "sub"), syscall.MNT_DETACH) })
	dc := f.image("mount", "/plugin/sub")
	dc["privileged"] = sdk.BoolValue(true)
	cfg := f.task(t, dc)
	cfg.Mounts = []*driverpb.Mount{{HostPath: host, TaskPath: "/plugin", Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL}}
	ready := readyEnv(cfg)
	f.start(t, cfg)
	waitFile(t, ready)
	got, err := os.ReadFile(filepath.Join(host, "sub", "made-inside"))
	if err != nil || string(got) != "inside\n" {
		t.Fatalf("the container's mount under a bidirectional mount is not on the host: %q, %v", got, err)
	}
	ctx, cancel := testCtx()
	defer cancel()
	if err := f.d.StopTask(ctx, cfg.GetId(), 10*time.Second, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(host, "sub", "made-inside")); !os.IsNotExist(err) {
		t.Errorf("the container's unmount did not reach the host: %v", err)
	}
}

// The config's mounts take their options: read-only and propagation.
func TestConfigMounts(t *testing.T) {
	f := newFixture(t)
	host := t.TempDir()
	dc := f.image("run")
	dc["mounts"] = sdk.ListValue(host+":/ro-slave:ro,rslave", host+":/rw")
	cfg := f.task(t, dc)
	ready := readyEnv(cfg)
	f.start(t, cfg)
	waitFile(t, ready)
	ctx, cancel := testCtx()
	defer cancel()
	st, err := f.d.InspectTask(ctx, cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	m, err := drivertest.ProcMounts(st.GetAttributes()["pid"])
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := m["/ro-slave"]; !ok || !e.ReadOnly || e.Propagation != driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK {
		t.Errorf("/ro-slave: %+v (mounted %v), want read-only host-to-task", e, ok)
	}
	if e, ok := m["/rw"]; !ok || e.ReadOnly || e.Propagation != driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE {
		t.Errorf("/rw: %+v (mounted %v), want read-write private", e, ok)
	}
}

// After the plugin is killed with SIGKILL, a new plugin finds the
// container again from the handle: same PID, still running, and its output
// still reaches the log files.
func TestRecoverAfterPluginKillKeepsPIDAndLogs(t *testing.T) {
	addr := containerdAddress(t)
	archive := imageArchive(t)
	launch := func() *sdk.DriverPlugin {
		p := drivertest.Launch(t, nil)
		ctx, cancel := testCtx()
		defer cancel()
		if err := p.Driver().SetConfig(ctx, &driverpb.PluginConfig{Values: pluginConfig(addr)}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := launch()
	f := &fixture{archive: archive}
	cfg := f.task(t, f.image("run"))
	ready := readyEnv(cfg)
	h := startOn(t, first.Driver(), cfg)
	waitFile(t, ready)
	ctx, cancel := testCtx()
	defer cancel()
	before, err := first.Driver().InspectTask(ctx, cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(first.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	second := launch().Driver()
	if err := second.RecoverTask(ctx, h); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := testCtx() // the test's own ctx is over by then
		defer cancel()
		second.DestroyTask(ctx, cfg.GetId(), true)
	})
	after, err := second.InspectTask(ctx, cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if after.GetState() != driverpb.TaskState_TASK_STATE_RUNNING || after.GetAttributes()["pid"] != before.GetAttributes()["pid"] ||
		after.GetStartedAt() != before.GetStartedAt() {
		t.Errorf("recovered task %v, want running as before: %v", after, before)
	}
	if err := second.StopTask(ctx, cfg.GetId(), 10*time.Second, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if res := waitOn(t, second, cfg.GetId()); res.GetExitCode() != 0 {
		t.Errorf("recovered task exited %v, want 0", res)
	}
	if out := logs(t, cfg, "stdout"); out != "got SIGTERM\n" {
		t.Errorf("stdout after recovery %q, want the output the task wrote after the plugin's restart", out)
	}
	// A handle whose container is gone is ErrTaskNotFound.
	if err := second.DestroyTask(ctx, cfg.GetId(), false); err != nil {
		t.Fatal(err)
	}
	if err := second.RecoverTask(ctx, h); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Errorf("RecoverTask of a destroyed container: %v, want ErrTaskNotFound", err)
	}
}

// Pulling cannot be tested here (no registry, no network): an unreachable
// registry fails the start with a StartError naming the image and the
// pull, and task events say the pull began and failed.
func TestPullFromAnUnreachableRegistry(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := testCtx()
	defer cancel()
	events := f.d.TaskEvents(ctx)
	const ref = "127.0.0.1:1/berth/unreachable:1"
	cfg := f.task(t, sdk.ConfigMap{"image": sdk.StringValue(ref)})
	_, err := f.d.StartTask(ctx, cfg)
	var se *sdk.StartError
	if !errors.As(err, &se) || se.Path != ref || !strings.Contains(se.Detail, "pull image") {
		t.Fatalf("StartTask of an unreachable image: %v, want a StartError for %s saying the pull failed", err, ref)
	}
	var msgs []string
	for ev, err := range events {
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetTaskId() != cfg.GetId() {
			continue
		}
		msgs = append(msgs, ev.GetMessage())
		if strings.Contains(ev.GetMessage(), "failed") {
			break
		}
	}
	if len(msgs) < 2 || msgs[0] != "Pulling image "+ref {
		t.Errorf("pull events %q, want Pulling image %s, then its failure", msgs, ref)
	}
	if _, err := f.d.InspectTask(ctx, cfg.GetId()); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Errorf("failed task left behind: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := testCtx()
	defer cancel()
	missing := filepath.Join(t.TempDir(), "none.tar")
	_, err := f.d.StartTask(ctx, f.task(t, sdk.ConfigMap{"image": sdk.StringValue(testImage), "load": sdk.StringValue(missing)}))
	var se *sdk.StartError
	if !errors.As(err, &se) || se.Reason != sdk.StartNotFound || se.Path != missing {
		t.Errorf("load of a missing archive: %v, want a not-found StartError naming it", err)
	}
	junk := filepath.Join(t.TempDir(), "junk.tar")
	if err := os.WriteFile(junk, []byte("not a tar"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = f.d.StartTask(ctx, f.task(t, sdk.ConfigMap{"image": sdk.StringValue(testImage), "load": sdk.StringValue(junk)}))
	if !errors.As(err, &se) || se.Path != junk || !strings.Contains(se.Detail, "import") {
		t.Errorf("load of a corrupt archive: %v, want a StartError naming it", err)
	}
}

// An archive with one image under another name is tagged with the job's.
func TestLoadTagsTheArchivesOnlyImage(t *testing.T) {
	f := newFixture(t)
	other := filepath.Join(t.TempDir(), "other.tar")
	if err := writeOCIArchive(other, "berth.test/other-name:7", testLayer, testDiffID, []string{"/taskprog"}, []string{"exit", "9"}); err != nil {
		t.Fatal(err)
	}
	cfg := f.task(t, sdk.ConfigMap{"image": sdk.StringValue("berth.test/as-the-job-says:1"), "load": sdk.StringValue(other)})
	if res := f.run(t, cfg); res.GetExitCode() != 9 {
		t.Errorf("task of the retagged image exited %v, want 9", res)
	}
}

// Without a reachable socket the driver is unhealthy, saying why, and
// refuses tasks; this needs no containerd.
func TestUnhealthyWithoutSocket(t *testing.T) {
	d := drivertest.InProcess(t, ctrdriver.New(drivertest.Logger(t)))
	ctx, cancel := testCtx()
	defer cancel()
	sock := filepath.Join(t.TempDir(), "no-containerd.sock")
	if err := d.SetConfig(ctx, &driverpb.PluginConfig{Values: sdk.ConfigMap{"address": sdk.StringValue(sock)}}); err != nil {
		t.Fatalf("SetConfig with an absent socket: %v (an absent socket is a health problem, not a config error)", err)
	}
	for fp, err := range d.Fingerprint(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if fp.GetHealth() != driverpb.Health_HEALTH_UNHEALTHY || !strings.Contains(fp.GetHealthDescription(), sock) {
			t.Errorf("fingerprint %v, want unhealthy naming %s", fp, sock)
		}
		break
	}
	_, err := d.StartTask(ctx, &driverpb.TaskConfig{Id: "t1", Name: "t", DriverConfig: sdk.ConfigMap{"image": sdk.StringValue("alpine")}})
	if !errors.Is(err, sdk.ErrDriverUnhealthy) || !strings.Contains(err.Error(), sock) {
		t.Errorf("StartTask on an unhealthy driver: %v, want ErrDriverUnhealthy naming the socket", err)
	}
}

// TestStartAndStopTimes measures StartTask → running for a loaded image
// (the archive already imported) and a stop through kill_timeout, and logs
// the medians; it asserts only the order of events.
func TestStartAndStopTimes(t *testing.T) {
	f := newFixture(t)
	f.runOutput(t, f.task(t, f.image("exit", "0"))) // import the archive once
	const n = 5
	var starts, stops, kills []time.Duration
	for range n {
		ctx, cancel := testCtx()
		cfg := f.task(t, f.image("run"))
		ready := readyEnv(cfg)
		begin := time.Now()
		f.start(t, cfg)
		starts = append(starts, time.Since(begin))
		waitFile(t, ready)
		begin = time.Now()
		if err := f.d.StopTask(ctx, cfg.GetId(), 10*time.Second, "SIGTERM"); err != nil {
			t.Fatal(err)
		}
		stops = append(stops, time.Since(begin))

		cfg = f.task(t, f.image("ignore"))
		ready = readyEnv(cfg)
		f.start(t, cfg)
		waitFile(t, ready)
		begin = time.Now()
		if err := f.d.StopTask(ctx, cfg.GetId(), 500*time.Millisecond, "SIGTERM"); err != nil {
			t.Fatal(err)
		}
		kills = append(kills, time.Since(begin))
		cancel()
	}
	med := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	t.Logf("StartTask → running (loaded image), median of %d: %s", n, med(starts))
	t.Logf("StopTask, task exits on SIGTERM, median: %s", med(stops))
	t.Logf("StopTask, task ignores SIGTERM, kill_timeout 500ms, median: %s", med(kills))
	if med(kills) < 500*time.Millisecond {
		t.Errorf("stop of a task ignoring SIGTERM took %s, less than its kill_timeout", med(kills))
	}
}

// The driver keeps probing: a containerd that appears at the configured
// address turns it healthy, with containerd's version.
func TestBecomesHealthyWhenContainerdAppears(t *testing.T) {
	addr := containerdAddress(t)
	d := drivertest.InProcess(t, ctrdriver.New(drivertest.Logger(t)))
	ctx, cancel := testCtx()
	defer cancel()
	link := filepath.Join(t.TempDir(), "later.sock")
	if err := d.SetConfig(ctx, &driverpb.PluginConfig{Values: pluginConfig(link)}); err != nil {
		t.Fatal(err)
	}
	first := true
	for fp, err := range d.Fingerprint(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if first {
			if fp.GetHealth() != driverpb.Health_HEALTH_UNHEALTHY {
				t.Fatalf("fingerprint before containerd is there: %v", fp)
			}
			if err := os.Symlink(addr, link); err != nil {
				t.Fatal(err)
			}
			first = false
			continue
		}
		if fp.GetHealth() == driverpb.Health_HEALTH_HEALTHY {
			if fp.GetAttributes()["driver.containerd.version"] == "" {
				t.Errorf("healthy fingerprint without containerd's version: %v", fp)
			}
			return
		}
	}
	t.Fatalf("fingerprint did not turn healthy: %v", ctx.Err())
}

// containerd restarting under a running task (its shim keeps the
// container) does not end the task: the driver waits again, and the task
// still stops and reports its exit afterwards.
func TestContainerdRestartDoesNotEndTasks(t *testing.T) {
	needOwnContainerd(t)
	dir, err := os.MkdirTemp("", "berth-ctrd-restart-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmountUnder(filepath.Join(dir, "state"))
		unmountUnder(filepath.Join(dir, "root"))
		os.RemoveAll(dir)
	})
	addr, stop, err := runContainerd(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop() })
	d := drivertest.InProcess(t, ctrdriver.New(drivertest.Logger(t)))
	ctx, cancel := testCtx()
	defer cancel()
	if err := d.SetConfig(ctx, &driverpb.PluginConfig{Values: pluginConfig(addr)}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{d: d, addr: addr, archive: imageArchive(t)}
	cfg := f.task(t, f.image("run"))
	ready := readyEnv(cfg)
	f.start(t, cfg)
	waitFile(t, ready)

	stop()
	if _, stop, err = runContainerd(dir); err != nil {
		t.Fatalf("restart containerd: %v", err)
	}
	if st, err := d.InspectTask(ctx, cfg.GetId()); err != nil || st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("task after containerd restarted: %v, %v; want running", st, err)
	}
	if err := d.StopTask(ctx, cfg.GetId(), 10*time.Second, "SIGTERM"); err != nil {
		t.Fatalf("StopTask after containerd restarted: %v", err)
	}
	if res := waitOn(t, d, cfg.GetId()); res.GetExitCode() != 0 || res.GetErr() != "" {
		t.Errorf("task stopped after containerd restarted: %v, want exit 0", res)
	}
	if out := logs(t, cfg, "stdout"); out != "got SIGTERM\n" {
		t.Errorf("stdout %q, want the task's output after the restart", out)
	}
}

// load takes `docker save` archives too.
func TestLoadDockerArchive(t *testing.T) {
	f := newFixture(t)
	imageArchive(t) // builds testLayer
	archive := filepath.Join(t.TempDir(), "docker.tar")
	if err := writeDockerArchive(archive, "berth.test/docker-saved:2", testLayer, testDiffID, []string{"/taskprog"}, []string{"exit", "6"}); err != nil {
		t.Fatal(err)
	}
	cfg := f.task(t, sdk.ConfigMap{"image": sdk.StringValue("berth.test/docker-saved:2"), "load": sdk.StringValue(archive)})
	if res := f.run(t, cfg); res.GetExitCode() != 6 {
		t.Errorf("task of the docker archive's image exited %v, want 6", res)
	}
}

// The task's resources are the container's cgroup limits: memory limit
// and CPU shares, read from the cgroup files of its process.
func TestResourcesAreCgroupLimits(t *testing.T) {
	f := newFixture(t)
	cfg := f.task(t, f.image("run"))
	cfg.Resources = &driverpb.Resources{CpuShares: 321, MemoryBytes: 96 << 20}
	ready := readyEnv(cfg)
	f.start(t, cfg)
	waitFile(t, ready)
	ctx, cancel := testCtx()
	defer cancel()
	st, err := f.d.InspectTask(ctx, cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	cgroups, err := os.ReadFile(filepath.Join("/proc", st.GetAttributes()["pid"], "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(file string) string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	v1 := map[string]string{}
	var v2 string
	for _, line := range lines(string(cgroups)) {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			v1[ctrl] = parts[2]
		}
	}
	if mem, ok := v1["memory"]; ok {
		if got := read(filepath.Join("/sys/fs/cgroup/memory", mem, "memory.limit_in_bytes")); got != strconv.Itoa(96<<20) {
			t.Errorf("memory.limit_in_bytes %s, want %d", got, 96<<20)
		}
		if got := read(filepath.Join("/sys/fs/cgroup/cpu", v1["cpu"], "cpu.shares")); got != "321" {
			t.Errorf("cpu.shares %s, want 321", got)
		}
		return
	}
	if got := read(filepath.Join("/sys/fs/cgroup", v2, "memory.max")); got != strconv.Itoa(96<<20) {
		t.Errorf("memory.max %s, want %d", got, 96<<20)
	}
}

// A container with the task's ID that the plugin does not know (its plugin
// died inside StartTask, before anyone got a handle) is replaced by the
// next start of that ID, as berth's driver manager expects.
func TestStartReplacesAnUnknownContainerOfTheSameID(t *testing.T) {
	f := newFixture(t)
	cfg := f.task(t, f.image("run"))
	ready := readyEnv(cfg)
	f.start(t, cfg)
	waitFile(t, ready)
	ctx, cancel := testCtx()
	defer cancel()
	old, err := f.d.InspectTask(ctx, cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(ready); err != nil {
		t.Fatal(err)
	}
	other := drivertest.InProcess(t, ctrdriver.New(drivertest.Logger(t)))
	if err := other.SetConfig(ctx, &driverpb.PluginConfig{Values: pluginConfig(f.addr)}); err != nil {
		t.Fatal(err)
	}
	startOn(t, other, cfg)
	waitFile(t, ready)
	st, err := other.InspectTask(ctx, cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if st.GetAttributes()["pid"] == old.GetAttributes()["pid"] {
		t.Errorf("the second start kept the first container's process %s", old.GetAttributes()["pid"])
	}
	if res := waitOn(t, f.d, cfg.GetId()); res.GetSignal() != int32(syscall.SIGKILL) {
		t.Errorf("the replaced container ended %v, want killed", res)
	}
}

// canceledCtx reports itself canceled without closing Done, so the calls
// to containerd go through and only StartTask's own check sees it: a
// caller that gave up by the time the container runs.
type canceledCtx struct{ context.Context }

func (canceledCtx) Err() error { return context.Canceled }

// A start whose caller gave up leaves no container running: nobody would
// get its handle.
func TestAbandonedStartLeavesNoContainer(t *testing.T) {
	f := newFixture(t)
	d := ctrdriver.New(drivertest.Logger(t))
	ctx, cancel := testCtx()
	defer cancel()
	if err := d.SetConfig(ctx, &driverpb.PluginConfig{Values: pluginConfig(f.addr)}); err != nil {
		t.Fatal(err)
	}
	cfg := f.task(t, f.image("run"))
	t.Cleanup(func() { d.DestroyTask(context.Background(), cfg.GetId(), true) }) // should it have started
	_, err := d.StartTask(canceledCtx{context.Background()}, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("StartTask for a caller that gave up: %v, want context.Canceled", err)
	}
	if _, err := d.InspectTask(ctx, cfg.GetId()); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Errorf("abandoned task is known: %v", err)
	}
	c, err := client.New(f.addr, client.WithDefaultNamespace(testNamespace))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.LoadContainer(namespaces.WithNamespace(ctx, testNamespace), cfg.GetId()); !errdefs.IsNotFound(err) {
		t.Errorf("abandoned start left container %s: %v", cfg.GetId(), err)
	}
}
