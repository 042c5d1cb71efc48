package drivertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// ReadyFileEnv names the environment variable every harness task gets: the
// absolute path of a file the task creates once it is ready for signals,
// for drivers that set Cases.ReadyFile.
const ReadyFileEnv = "DRIVERTEST_READY_FILE"

// Harness describes the driver under test.
type Harness struct {
	// Command returns a new command starting the plugin, for each plugin
	// the harness launches. Nil: this test binary (TestMain must call
	// ServeIfPlugin).
	Command func() *exec.Cmd
	// PluginConfig is passed to SetConfig on every plugin launched.
	PluginConfig sdk.ConfigMap
	// Cases are the task configs the checks run.
	Cases Cases
	// Timeout bounds every operation that should complete (a stop, a
	// wait for a prompt exit); default 60s. Checks assert order and
	// outcome, never speed.
	Timeout time.Duration
}

// Cases are the driver configs (TaskConfig.driver_config) for the
// behaviours the checks need. The harness fills in the rest of the
// TaskConfig: ID, name, a fresh task_dir and log_dir, and an environment
// with PATH and ReadyFileEnv.
type Cases struct {
	// ExitCode is a task that exits promptly with code. Required.
	ExitCode func(code int) sdk.ConfigMap
	// RunUntilStopped is a task that runs until it gets SIGTERM and then
	// exits promptly. Required.
	RunUntilStopped func() sdk.ConfigMap
	// IgnoreStopSignal is a task that ignores SIGTERM, so only the kill
	// after the stop timeout ends it. Optional.
	IgnoreStopSignal func() sdk.ConfigMap
	// ExitAfter is a task that runs for about d and then exits with code.
	// Optional; it checks that a task's exit code survives a plugin kill.
	ExitAfter func(code int, d time.Duration) sdk.ConfigMap
	// WithChild is a task that runs until it gets SIGTERM, having started
	// a child process `sleep token` (token is a number of seconds) that
	// ignores SIGTERM and so outlives its parent unless the driver ends
	// it. Optional, for drivers running real processes; it checks that
	// no process of a task runs once WaitTask returned its exit.
	WithChild func(token string) sdk.ConfigMap
	// BadConfigs are driver configs the driver must reject, each naming
	// the key it must blame. An unknown key is always checked.
	BadConfigs []BadConfig
	// MountsSeen returns the mounts the running task cfg got, as the
	// driver under test can tell: from its InspectTask status (mock), or
	// from the task's own mount table for an isolating driver. Required
	// for drivers that honour mounts (sdk.MountsSupported); the mount
	// checks compare it with the mounts the task was started with.
	MountsSeen func(ctx context.Context, d sdk.Driver, cfg *driverpb.TaskConfig) ([]*driverpb.Mount, error)
	// ReadyFile: RunUntilStopped and IgnoreStopSignal tasks create the
	// file named by ReadyFileEnv once they handle signals as described,
	// and the harness waits for it before signalling them. Set it for
	// drivers running real processes, which install signal handlers some
	// time after they start.
	ReadyFile bool
}

// BadConfig is an invalid driver config and the key its error must name.
type BadConfig struct {
	Config sdk.ConfigMap
	Key    string
}

// Run runs every check against the driver as subtests.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Cases.ExitCode == nil || h.Cases.RunUntilStopped == nil {
		t.Fatal("drivertest: Cases.ExitCode and Cases.RunUntilStopped are required")
	}
	if h.Timeout <= 0 {
		h.Timeout = 60 * time.Second
	}
	s := &suite{h: h}
	s.driver = s.launch(t).Driver()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.run(t, s) })
	}
}

// suite is the state the checks share: one plugin for most of them.
type suite struct {
	h      Harness
	driver *sdk.DriverClient
	seq    atomic.Int64
}

type check struct {
	name string
	run  func(t *testing.T, s *suite)
}

// checks, in the order they run; each lives in the file of its topic.
var checks = []check{
	{"Info", checkInfo},
	{"Fingerprint", checkFingerprint},
	{"ExitCodes", checkExitCodes},
	{"ConcurrentTasks", checkConcurrent},
	{"StopRunning", checkStopRunning},
	{"StopTimeoutKills", checkStopTimeoutKills},
	{"DestroyRunning", checkDestroyRunning},
	{"UnknownTask", checkUnknownTask},
	{"DuplicateID", checkDuplicateID},
	{"BadTaskConfig", checkBadTaskConfig},
	{"BadPluginConfig", checkBadPluginConfig},
	{"Mounts", checkMounts},
	{"WaitHonoursContext", checkWaitContext},
	{"Signal", checkSignal},
	{"ChildGoneAtExit", checkChildGoneAtExit},
	{"RecoverSamePlugin", checkRecoverSamePlugin},
	{"RecoverAfterPluginKill", checkRecoverAfterKill},
}

// launch starts a plugin and configures it.
func (s *suite) launch(t *testing.T) *sdk.DriverPlugin {
	t.Helper()
	var cmd *exec.Cmd
	if s.h.Command != nil {
		cmd = s.h.Command()
	}
	p := Launch(t, cmd)
	ctx, cancel := s.ctx()
	defer cancel()
	if err := p.Driver().SetConfig(ctx, &driverpb.PluginConfig{Values: s.h.PluginConfig}); err != nil {
		t.Fatalf("SetConfig(%v): %v", s.h.PluginConfig, err)
	}
	return p
}

func (s *suite) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.h.Timeout)
}

// task builds a TaskConfig around a driver config.
func (s *suite) task(t *testing.T, driverConfig sdk.ConfigMap) *driverpb.TaskConfig {
	dir := t.TempDir()
	n := s.seq.Add(1)
	return &driverpb.TaskConfig{
		Id:           fmt.Sprintf("drivertest-%d-%d", os.Getpid(), n),
		Name:         fmt.Sprintf("task%d", n),
		AllocId:      fmt.Sprintf("alloc-%d", n),
		JobId:        "drivertest",
		Group:        "group",
		TaskDir:      dir,
		LogDir:       filepath.Join(dir, "logs"),
		Logs:         &driverpb.LogConfig{MaxFiles: 2, MaxFileSizeBytes: 1 << 20},
		Env:          map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", ReadyFileEnv: filepath.Join(dir, "ready")},
		Resources:    &driverpb.Resources{CpuShares: 100, MemoryBytes: 64 << 20},
		DriverConfig: driverConfig,
	}
}

// start starts a task on d and registers its forced destruction at the end
// of the test, so no task outlives it.
func (s *suite) start(t *testing.T, d sdk.Driver, cfg *driverpb.TaskConfig) *driverpb.TaskHandle {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	h, err := d.StartTask(ctx, cfg)
	if err != nil {
		t.Fatalf("StartTask(%s): %v", cfg.GetId(), err)
	}
	t.Cleanup(func() { s.destroy(t, d, cfg.GetId()) })
	if h.GetConfig().GetId() != cfg.GetId() {
		t.Errorf("StartTask handle is for task %q, want %q", h.GetConfig().GetId(), cfg.GetId())
	}
	return h
}

// destroy force-destroys a task, tolerating a dead plugin (its tasks are
// then recovered and destroyed through the plugin that replaced it).
func (s *suite) destroy(t *testing.T, d sdk.Driver, id string) {
	ctx, cancel := s.ctx()
	defer cancel()
	if err := d.DestroyTask(ctx, id, true); err != nil && !errors.Is(err, sdk.ErrPluginShutdown) {
		t.Errorf("cleanup: DestroyTask(%s, force): %v", id, err)
	}
}

// startReady starts a task and, for ReadyFile drivers, waits until it says
// it is ready for signals.
func (s *suite) startReady(t *testing.T, d sdk.Driver, cfg *driverpb.TaskConfig) *driverpb.TaskHandle {
	t.Helper()
	h := s.start(t, d, cfg)
	if !s.h.Cases.ReadyFile {
		return h
	}
	deadline := time.Now().Add(s.h.Timeout)
	for {
		if _, err := os.Stat(cfg.GetEnv()[ReadyFileEnv]); err == nil {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s did not create its ready file %s within %s", cfg.GetId(), cfg.GetEnv()[ReadyFileEnv], s.h.Timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wait waits for a task's exit within the harness timeout.
func (s *suite) wait(t *testing.T, d sdk.Driver, id string) *driverpb.ExitResult {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	res, err := d.WaitTask(ctx, id)
	if err != nil {
		t.Fatalf("WaitTask(%s): %v", id, err)
	}
	return res
}

// inspect returns a task's status, failing the test on error.
func (s *suite) inspect(t *testing.T, d sdk.Driver, id string) *driverpb.TaskStatus {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	st, err := d.InspectTask(ctx, id)
	if err != nil {
		t.Fatalf("InspectTask(%s): %v", id, err)
	}
	return st
}

// wantErr fails unless err wraps target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}
