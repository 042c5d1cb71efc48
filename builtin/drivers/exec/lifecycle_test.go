package execdriver_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
)

// TestKillSignalAndTimeout: StopTask sends the task's kill_signal, and a
// task that ignores it is killed once kill_timeout has passed, not before.
func TestKillSignalAndTimeout(t *testing.T) {
	d := client(t)
	graceful := taskCfg(t, "sigint", sh(`trap 'exit 3' INT; touch /ready; while :; do sleep 0.02; done`))
	start(t, d, graceful)
	waitFile(t, filepath.Join(graceful.GetTaskDir(), "ready"))
	if err := d.StopTask(ctxT(t), graceful.GetId(), generous, "SIGINT"); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, d, graceful.GetId()); res.GetExitCode() != 3 {
		t.Errorf("task trapping SIGINT ended with %v, want its exit code 3", res)
	}

	stubborn := taskCfg(t, "stubborn", sh(`trap '' TERM; touch /ready; while :; do sleep 0.02; done`))
	start(t, d, stubborn)
	waitFile(t, filepath.Join(stubborn.GetTaskDir(), "ready"))
	const killTimeout = 700 * time.Millisecond
	begin := time.Now()
	if err := d.StopTask(ctxT(t), stubborn.GetId(), killTimeout, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < killTimeout {
		t.Errorf("task ignoring SIGTERM stopped after %s, before its kill timeout %s", took, killTimeout)
	}
	if res := wait(t, d, stubborn.GetId()); res.GetSignal() != int32(syscall.SIGKILL) {
		t.Errorf("task ignoring SIGTERM ended with %v, want SIGKILL", res)
	}
}

// TestDaemonDiesWithTask: a grandchild that left the task's session and
// process group (a daemon) is gone once the task has stopped, because the
// task's PID namespace ends with it.
func TestDaemonDiesWithTask(t *testing.T) {
	d := client(t)
	marker := strconv.Itoa(900000 + os.Getpid()%99999)
	cfg := taskCfg(t, "daemon", sh(`setsid sh -c 'exec sleep `+marker+`' </dev/null >/dev/null 2>&1 & touch /ready; exec sleep 1000`))
	start(t, d, cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))
	waitFor(t, "the daemon to run", func() bool { return len(sleepers(t, marker)) > 0 })
	if err := d.StopTask(ctxT(t), cfg.GetId(), generous, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if pids := sleepers(t, marker); len(pids) > 0 {
		t.Errorf("the task's daemon survived it: pids %v", pids)
	}
}

// sleepers lists the host PIDs of processes running "sleep marker".
func sleepers(t *testing.T, marker string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Equal(cmd, []byte("sleep\x00"+marker+"\x00")) {
			out = append(out, pid)
		}
	}
	return out
}

// TestKilledPluginTaskRecovered: kill -9 the plugin while a task runs; a
// new plugin recovers the same task (same PID), and WaitTask delivers the
// exit code the task chose after the old plugin died.
func TestKilledPluginTaskRecovered(t *testing.T) {
	client(t) // root or skip
	launch := func() *sdk.DriverPlugin {
		p := drivertest.Launch(t, nil)
		if err := p.Driver().SetConfig(ctxT(t), &driverpb.PluginConfig{Values: enabled}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := launch()
	cfg := taskCfg(t, "survivor", sh(`touch /ready; while [ ! -e /go ]; do sleep 0.02; done; exit 7`))
	cfg.Resources = &driverpb.Resources{MemoryBytes: 64 << 20}
	h := start(t, first.Driver(), cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))
	before, err := first.Driver().InspectTask(ctxT(t), cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(first.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Driver().InspectTask(ctxT(t), cfg.GetId()); !errors.Is(err, sdk.ErrPluginShutdown) {
		t.Fatalf("call to the killed plugin = %v, want ErrPluginShutdown", err)
	}

	second := launch()
	d := second.Driver()
	if err := d.RecoverTask(ctxT(t), h); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	t.Cleanup(func() { d.DestroyTask(ctxT(t), cfg.GetId(), true) })
	st, err := d.InspectTask(ctxT(t), cfg.GetId())
	if err != nil || st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("recovered task: %v, %v; want running", st, err)
	}
	if got, want := st.GetAttributes()["pid"], before.GetAttributes()["pid"]; got != want {
		t.Errorf("recovered task has pid %s, want the same task (pid %s)", got, want)
	}
	// The new plugin reaches the task's init too.
	if res, err := d.ExecTask(ctxT(t), cfg.GetId(), []string{"cat", "/proc/1/comm"}, 0); err != nil || res.GetExit().GetExitCode() != 0 || len(res.GetStdout()) == 0 {
		t.Errorf("ExecTask in the recovered task: %v, %v", res, err)
	}
	if err := os.WriteFile(filepath.Join(cfg.GetTaskDir(), "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, d, cfg.GetId()); res.GetExitCode() != 7 || res.GetOomKilled() {
		t.Errorf("recovered task ended with %v, want exit code 7", res)
	}
	if err := d.DestroyTask(ctxT(t), cfg.GetId(), false); err != nil {
		t.Fatal(err)
	}
	// The removal goes on in the background once the task is gone
	// (cgroup_release.go); the recovered task's cgroup must go too.
	for _, dir := range cgroupDirs(cfg.GetId()) {
		waitFor(t, "cgroup "+dir+" of the recovered task removed", func() bool { _, err := os.Stat(dir); return err != nil })
	}
}
