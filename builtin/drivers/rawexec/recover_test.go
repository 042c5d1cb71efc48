package rawexec_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
	"berth.dev/berth/sdk/procfs"
)

// launch starts raw_exec as a real plugin process (this test binary) and
// enables it.
func launch(t *testing.T) *sdk.DriverPlugin {
	p := drivertest.Launch(t, nil)
	if err := p.Driver().SetConfig(ctxT(t), &driverpb.PluginConfig{Values: enabled}); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKilledPluginTaskRecoveredWithRealExitCode: kill -9 the plugin while
// a task runs; a new plugin recovers the task alive, and WaitTask still
// delivers the exit code the task chose after the old plugin died.
func TestKilledPluginTaskRecoveredWithRealExitCode(t *testing.T) {
	first := launch(t)
	// The task runs until the test creates "go", then exits 7.
	cfg := taskCfg(t, "survivor", sh(`touch ready; while [ ! -e go ]; do sleep 0.02; done; exit 7`))
	h := start(t, first.Driver(), cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))

	if err := syscall.Kill(first.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Driver().InspectTask(ctxT(t), cfg.GetId()); !errors.Is(err, sdk.ErrPluginShutdown) {
		t.Fatalf("call to the killed plugin = %v, want ErrPluginShutdown", err)
	}

	second := launch(t)
	d := second.Driver()
	if err := d.RecoverTask(ctxT(t), h); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	t.Cleanup(func() { d.DestroyTask(ctxT(t), cfg.GetId(), true) })
	st, err := d.InspectTask(ctxT(t), cfg.GetId())
	if err != nil || st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("recovered task: %v, %v; want running", st, err)
	}
	if err := os.WriteFile(filepath.Join(cfg.GetTaskDir(), "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := wait(t, d, cfg.GetId())
	if res.GetExitCode() != 7 || res.GetSignal() != 0 || res.GetErr() != "" {
		t.Errorf("recovered task exited %v, want its real exit code 7", res)
	}
}

// TestRecoverAfterExitWhilePluginDown: the task ends while no plugin runs;
// the executor's record gives the new plugin its exit code.
func TestRecoverAfterExitWhilePluginDown(t *testing.T) {
	first := launch(t)
	cfg := taskCfg(t, "finished", sh(`while [ ! -e go ]; do sleep 0.02; done; exit 5`))
	h := start(t, first.Driver(), cfg)
	if err := syscall.Kill(first.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.GetTaskDir(), "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(cfg.GetTaskDir(), ".rawexec", cfg.GetId(), "exit.json"))

	d := launch(t).Driver()
	if err := d.RecoverTask(ctxT(t), h); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	t.Cleanup(func() { d.DestroyTask(ctxT(t), cfg.GetId(), true) })
	if res := wait(t, d, cfg.GetId()); res.GetExitCode() != 5 {
		t.Errorf("exit %v, want 5", res)
	}
}

// TestRecoverRejectsReusedPID: a handle whose executor PID now belongs to
// another process (same PID, different start time) is not taken for the
// task, and that process is left alone.
func TestRecoverRejectsReusedPID(t *testing.T) {
	d := client(t)
	cfg := taskCfg(t, "reused", sh(`exit 0`))
	h := start(t, d, cfg)
	wait(t, d, cfg.GetId())
	if err := d.DestroyTask(ctxT(t), cfg.GetId(), false); err != nil {
		t.Fatal(err)
	}

	// An innocent process, standing in for whatever got the PID next.
	innocent := exec.Command("sleep", "1000")
	if err := innocent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { innocent.Process.Kill(); innocent.Wait() })
	real, err := procfs.Self(innocent.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Executor struct {
			Executor procfs.Identity `json:"executor"`
			Task     procfs.Identity `json:"task"`
			StateDir string          `json:"state_dir"`
		} `json:"executor"`
	}
	if err := json.Unmarshal(h.GetDriverState(), &st); err != nil {
		t.Fatal(err)
	}
	faked := procfs.Identity{Pid: real.Pid, StartTicks: real.StartTicks + 1}
	st.Executor.Executor, st.Executor.Task = faked, faked
	reused := proto.Clone(h).(*driverpb.TaskHandle)
	reused.DriverState, _ = json.Marshal(st)
	if err := os.MkdirAll(st.Executor.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}

	err = d.RecoverTask(ctxT(t), reused)
	if !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("RecoverTask with a reused PID = %v, want ErrTaskNotFound", err)
	}
	if alive, err := real.Alive(); err != nil || !alive {
		t.Errorf("the process now holding the PID was harmed (alive=%v, %v)", alive, err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := innocent.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("innocent process gone: %v", err)
	}
}

func TestRecoverRejectsForeignStateDir(t *testing.T) {
	d := client(t)
	cfg := taskCfg(t, "mine", sh(`exec sleep 1000`))
	h := start(t, d, cfg)
	other := proto.Clone(h).(*driverpb.TaskHandle)
	other.Config.Id = "someone-else"
	if err := d.RecoverTask(ctxT(t), other); !errors.Is(err, sdk.ErrInvalidHandle) {
		t.Errorf("handle whose state dir belongs to another task: %v, want ErrInvalidHandle", err)
	}
}
