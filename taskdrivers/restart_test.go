package taskdrivers

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/builtin/drivers"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// history records every DriverInfo change of one driver.
type history struct {
	mu    sync.Mutex
	infos []*pb.DriverInfo
}

func observe(m *Manager, name string) *history {
	h := &history{}
	m.observe = func(i *pb.DriverInfo) {
		if i.GetName() == name {
			h.mu.Lock()
			h.infos = append(h.infos, i)
			h.mu.Unlock()
		}
	}
	return h
}

func (h *history) snapshot() []*pb.DriverInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*pb.DriverInfo(nil), h.infos...)
}

type waitResult struct {
	res *driverpb.ExitResult
	err error
}

func waitInBackground(t *testing.T, d *Driver, id string) <-chan waitResult {
	ch := make(chan waitResult, 1)
	ctx := ctxT(t)
	go func() {
		res, err := d.WaitTask(ctx, id)
		ch <- waitResult{res, err}
	}()
	return ch
}

func wantExit(t *testing.T, ch <-chan waitResult, code int32) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || r.res.GetExitCode() != code {
			t.Fatalf("WaitTask: %v, %v; want exit code %d", r.res, r.err, code)
		}
	case <-time.After(generous):
		t.Fatal("WaitTask did not return")
	}
}

func TestKilledPluginIsRestartedAndTaskRecovered(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(rawExecEnabled), nil)
	hist := observe(m, "raw_exec")
	e.start(m)
	d := driver(t, m, "raw_exec")
	cfg, gate := gatedTask(t, "k1", 7)
	if _, err := d.StartTask(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	pid := taskPid(t, d, "k1")
	killTaskAtEnd(t, pid)
	waiting := waitInBackground(t, d, "k1")

	oldPlugin := pluginPid(m, "raw_exec")
	if err := syscall.Kill(oldPlugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, generous, func() error {
		if p := pluginPid(m, "raw_exec"); p == 0 || p == oldPlugin {
			return errors.New("no new plugin yet")
		}
		return nil
	})
	info(t, m, "raw_exec", healthy)

	// The same task process, found again by the new plugin.
	if got := taskPid(t, d, "k1"); got != pid {
		t.Fatalf("task pid %d after the plugin restart, was %d: the task was restarted, not recovered", got, pid)
	}
	select {
	case r := <-waiting:
		t.Fatalf("WaitTask returned while the task still runs: %v, %v", r.res, r.err)
	default:
	}
	release(t, gate)
	wantExit(t, waiting, 7)

	// Operators saw why: unhealthy, saying the plugin exited and when it restarts.
	var sawDown bool
	for _, i := range hist.snapshot() {
		desc := i.GetHealthDescription()
		if !i.GetHealthy() && i.GetDetected() && strings.Contains(desc, "exited") &&
			strings.Contains(desc, "restarting in") && strings.Contains(desc, "(restart 1)") {
			sawDown = true
		}
	}
	if !sawDown {
		t.Fatalf("no unhealthy 'exited; restarting' state in %v", hist.snapshot())
	}
}

func TestCrashedPluginTaskKeepsItsExitCode(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(), nil)
	e.start(m)
	d := driver(t, m, "mock")
	first := pluginPid(m, "mock")
	cfg := &driverpb.TaskConfig{Id: "c1", Name: "web", DriverConfig: sdk.ConfigMap{
		"crash_plugin_after": sdk.StringValue("100ms"),
		"run_for":            sdk.StringValue("1s"),
		"exit_code":          sdk.IntValue(4),
	}}
	if _, err := d.StartTask(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	res, err := d.WaitTask(ctxT(t), "c1")
	if err != nil || res.GetExitCode() != 4 {
		t.Fatalf("WaitTask across the plugin crash: %v, %v", res, err)
	}
	if p := pluginPid(m, "mock"); p == first || p == 0 {
		t.Fatalf("plugin pid %d, first %d: the plugin did not crash and restart", p, first)
	}
}

// TestClientRestartAfterShutdownRecoversTask: a graceful agent stop ends
// the plugins but not the tasks; the next start finds the same task.
func TestClientRestartAfterShutdownRecoversTask(t *testing.T) {
	e := newEnv(t)
	m1 := e.newManager(e.catalog(rawExecEnabled), nil)
	e.start(m1)
	cfg, gate := gatedTask(t, "s1", 5)
	if _, err := driver(t, m1, "raw_exec").StartTask(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	pid := taskPid(t, driver(t, m1, "raw_exec"), "s1")
	killTaskAtEnd(t, pid)
	plugin1 := pluginPid(m1, "raw_exec")
	if err := m1.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if alive(plugin1) || !alive(pid) {
		t.Fatalf("after Shutdown: plugin alive %t (want false), task alive %t (want true)", alive(plugin1), alive(pid))
	}
	// The client restarts: a new state DB handle on the same data dir.
	e.db.Close()
	e.openDB()

	m2 := e.newManager(e.catalog(rawExecEnabled), nil)
	e.start(m2)
	d := driver(t, m2, "raw_exec")
	if got := taskPid(t, d, "s1"); got != pid {
		t.Fatalf("task pid %d after the client restart, was %d", got, pid)
	}
	waiting := waitInBackground(t, d, "s1")
	release(t, gate)
	wantExit(t, waiting, 5)
}

// TestClientRestartAfterCrashReattaches: a client that dies leaves its
// plugins running; the next one reattaches to them from the state DB.
func TestClientRestartAfterCrashReattaches(t *testing.T) {
	tmp := privateTempDir(t)
	e := newEnv(t)
	m1 := e.newManager(e.catalog(rawExecEnabled), nil)
	e.start(m1)
	cfg, gate := gatedTask(t, "c1", 6)
	if _, err := driver(t, m1, "raw_exec").StartTask(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	pid := taskPid(t, driver(t, m1, "raw_exec"), "c1")
	killTaskAtEnd(t, pid)
	plugin1 := pluginPid(m1, "raw_exec")
	m1.abandon()

	m2 := e.newManager(e.catalog(rawExecEnabled), nil)
	e.start(m2)
	if got := pluginPid(m2, "raw_exec"); got != plugin1 {
		t.Fatalf("plugin pid %d after the client restart, want the running %d reattached", got, plugin1)
	}
	d := driver(t, m2, "raw_exec")
	if got := taskPid(t, d, "c1"); got != pid {
		t.Fatalf("task pid %d after the client restart, was %d", got, pid)
	}
	waiting := waitInBackground(t, d, "c1")
	release(t, gate)
	wantExit(t, waiting, 6)

	if err := m2.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if alive(plugin1) {
		t.Fatal("the reattached plugin survived Shutdown")
	}
	if left := socketDirs(t, tmp); len(left) != 0 {
		t.Fatalf("socket directories left after stopping the reattached plugin: %v", left)
	}
}

func TestPluginOfAnotherBerthVersionIsReplaced(t *testing.T) {
	e := newEnv(t)
	m1 := e.newManager(e.catalog(rawExecEnabled), func(c *Config) { c.BerthVersion = "0.0.1-old" })
	e.start(m1)
	cfg, gate := gatedTask(t, "v1", 3)
	if _, err := driver(t, m1, "raw_exec").StartTask(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	pid := taskPid(t, driver(t, m1, "raw_exec"), "v1")
	killTaskAtEnd(t, pid)
	old := pluginPid(m1, "raw_exec")
	m1.abandon()

	m2 := e.newManager(e.catalog(rawExecEnabled), nil)
	e.start(m2)
	if p := pluginPid(m2, "raw_exec"); p == old || p == 0 {
		t.Fatalf("plugin pid %d: the old version's plugin %d was reattached", p, old)
	}
	testutil.WaitFor(t, generous, func() error {
		if alive(old) {
			return errors.New("the old version's plugin still runs")
		}
		return nil
	})
	if rec := record(t, e, "raw_exec"); rec.GetReattach().GetPid() != int64(pluginPid(m2, "raw_exec")) || rec.GetBerthVersion() == "0.0.1-old" {
		t.Fatalf("raw_exec reattach record %v, want the new plugin's", rec)
	}
	d := driver(t, m2, "raw_exec")
	if got := taskPid(t, d, "v1"); got != pid {
		t.Fatalf("task pid %d under the new plugin, was %d", got, pid)
	}
	waiting := waitInBackground(t, d, "v1")
	release(t, gate)
	wantExit(t, waiting, 3)
}

func TestDeadPluginRecordStartsANewPlugin(t *testing.T) {
	e := newEnv(t)
	err := e.db.PutDriverPlugin(&pb.DriverPluginRecord{
		Name: "mock", Path: testExecutable(t), Args: drivers.Args("mock"),
		Reattach: &pb.PluginReattach{Pid: 1 << 22, Network: "unix", Address: "/nonexistent/plugin.sock"},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := e.newManager(e.catalog(), nil)
	e.start(m)
	if i := m.DriverInfos()["mock"]; !i.GetHealthy() {
		t.Fatalf("mock: %v", i)
	}
	if mockRec := record(t, e, "mock"); mockRec.GetReattach().GetPid() != int64(pluginPid(m, "mock")) {
		t.Fatalf("mock reattach record %v, want the new plugin's pid %d", mockRec, pluginPid(m, "mock"))
	}
}

func TestStopTasksOnShutdown(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(rawExecEnabled), func(c *Config) {
		c.StopTasksOnShutdown = true
		c.StopTimeout = 5 * time.Second
	})
	e.start(m)
	cfg, _ := gatedTask(t, "d1", 0)
	if _, err := driver(t, m, "raw_exec").StartTask(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	pid := taskPid(t, driver(t, m, "raw_exec"), "d1")
	killTaskAtEnd(t, pid)
	if err := m.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatal("task still runs after Shutdown with StopTasksOnShutdown")
	}
	if hs, _ := e.db.TaskHandles(); len(hs) != 0 {
		t.Fatalf("handles left: %v", hs)
	}
	// Without the option a task outlives Shutdown (see the client restart tests).
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

func record(t *testing.T, e *env, name string) *pb.DriverPluginRecord {
	t.Helper()
	recs, err := e.db.DriverPlugins()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.GetName() == name {
			return r
		}
	}
	t.Fatalf("no reattach record for %s in %v", name, recs)
	return nil
}

// A task whose start is under way when Shutdown begins is stopped too, not
// left running with a handle persisted after Shutdown listed them.
func TestStopTasksOnShutdownIncludesTasksStarting(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(), func(c *Config) {
		c.StopTasksOnShutdown = true
		c.StopTimeout = 5 * time.Second
	})
	e.start(m)
	d := driver(t, m, "mock")
	cfg := &driverpb.TaskConfig{Id: "slow", Name: "web", DriverConfig: sdk.ConfigMap{"start_block_for": sdk.StringValue("1s")}}
	started := make(chan error, 1)
	go func() {
		_, err := d.StartTask(ctxT(t), cfg)
		started <- err
	}()
	testutil.WaitFor(t, generous, func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.starting["slow"] {
			return errors.New("start not under way")
		}
		return nil
	})
	if err := m.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	hs, err := e.db.TaskHandles()
	if err != nil || len(hs) != 0 {
		t.Fatalf("handles left after Shutdown: %v, %v", hs, err)
	}
	select {
	case err := <-started:
		if err != nil && !errors.Is(err, ErrShutdown) {
			t.Errorf("StartTask under Shutdown: %v, want success or ErrShutdown", err)
		}
	case <-time.After(generous):
		t.Fatal("StartTask still blocked after Shutdown")
	}
	if hs, err := e.db.TaskHandles(); err != nil || len(hs) != 0 {
		t.Fatalf("handles left once the start returned: %v, %v", hs, err)
	}
}

// A task the plugin started while its caller gave up gets no handle, so it
// must not be left running.
func TestStartAbandonedByItsCallerIsDestroyed(t *testing.T) {
	e := newEnv(t)
	e.fake("late", "startlate", "late")
	m := e.newManager(e.catalog(), nil)
	e.start(m)
	d := driver(t, m, "late")
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	cfg := &driverpb.TaskConfig{Id: "late1", Name: "web", DriverConfig: sdk.ConfigMap{"run_for": sdk.StringValue("1h")}}
	started := make(chan error, 1)
	go func() {
		_, err := d.StartTask(ctx, cfg)
		started <- err
	}()
	// The plugin has started the task and still holds its reply.
	testutil.WaitFor(t, generous, func() error {
		_, err := d.InspectTask(ctxT(t), "late1")
		return err
	})
	cancel()
	select {
	case err := <-started:
		wantErr(t, err, context.Canceled)
	case <-time.After(generous):
		t.Fatal("StartTask did not return after its ctx ended")
	}
	if st, err := d.InspectTask(ctxT(t), "late1"); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("task of the abandoned start: %v, %v; want it destroyed", st, err)
	}
	if hs, err := e.db.TaskHandles(); err != nil || len(hs) != 0 {
		t.Fatalf("handles: %v, %v", hs, err)
	}
}

// failingHandles is the state DB with task handles that cannot be written.
type failingHandles struct {
	*state.DB
	err error
}

func (f failingHandles) PutTaskHandle(*pb.TaskHandleRecord) error { return f.err }

// A start whose handle cannot be persisted destroys its task again; a
// plugin that never answers that DestroyTask must not hang StartTask (the
// clean-up used to run with no deadline at all).
func TestCleanupOfAStartWithoutAHandleHasADeadline(t *testing.T) {
	e := newEnv(t)
	calls := filepath.Join(t.TempDir(), "calls")
	e.script("stuck", fmt.Sprintf("%s=%q %s=destroyhang %s=stuck exec %q", fakeCallsEnv, calls, fakeEnv, fakeNameEnv, testExecutable(t)), 0o755)
	errFull := errors.New("no space left on device")
	m := e.newManager(e.catalog(), func(c *Config) {
		c.Store = failingHandles{DB: e.db, err: errFull}
		c.CleanupTimeout = 200 * time.Millisecond
	})
	e.start(m)
	d := driver(t, m, "stuck")
	done := make(chan error, 1)
	go func() {
		_, err := d.StartTask(ctxT(t), &driverpb.TaskConfig{Id: "s1", Name: "web", DriverConfig: sdk.ConfigMap{"run_for": sdk.StringValue("1h")}})
		done <- err
	}()
	select {
	case err := <-done:
		wantErr(t, err, errFull)
		if !strings.Contains(err.Error(), `"s1"`) {
			t.Fatalf("error does not name the task: %v", err)
		}
	case <-time.After(generous):
		t.Fatal("StartTask hung cleaning up after a handle it could not persist")
	}
	// It returned because the cleanup had a deadline, not because it
	// skipped the cleanup.
	testutil.WaitFor(t, generous, func() error {
		if got := fakeCalls(t, calls); !slices.Equal(got, []string{"DestroyTask s1"}) {
			return fmt.Errorf("calls the plugin saw: %q, want one DestroyTask of s1", got)
		}
		return nil
	})
}

// switchableHandles is the state DB whose task handle writes fail while
// full is set.
type switchableHandles struct {
	*state.DB
	full *atomic.Bool
	err  error
}

func (s switchableHandles) PutTaskHandle(rec *pb.TaskHandleRecord) error {
	if s.full.Load() {
		return s.err
	}
	return s.DB.PutTaskHandle(rec)
}

// A client restarted on a full disk recovered its
// running tasks, failed to write again the handles it had just read, and
// took that for a failed recovery, whose clean-up killed the tasks. A
// handle the store holds as it is needs no write; one it does not hold
// still must be written, and its recovery fails naming the error.
func TestRecoverTaskOfAStoredHandleNeedsNoWrite(t *testing.T) {
	e := newEnv(t)
	full := &atomic.Bool{}
	errFull := errors.New("no space left on device")
	m := e.newManager(e.catalog(), func(c *Config) { c.Store = switchableHandles{DB: e.db, full: full, err: errFull} })
	e.start(m)
	d := driver(t, m, "mock")
	h, err := d.StartTask(ctxT(t), &driverpb.TaskConfig{Id: "r1", Name: "web", AllocId: "a1", DriverConfig: sdk.ConfigMap{"run_for": sdk.StringValue("1h")}})
	if err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	if err := d.RecoverTask(ctxT(t), h); err != nil {
		t.Fatalf("RecoverTask of the stored handle with the disk full: %v, want nil (nothing to write)", err)
	}
	if st, err := d.InspectTask(ctxT(t), "r1"); err != nil || st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("task r1 after the recovery: %v, %v; want running", st, err)
	}

	// A handle the store does not hold (another start of it, say) must be
	// written for a plugin restart to recover it.
	other := proto.Clone(h).(*driverpb.TaskHandle)
	other.StartedAt++
	err = d.RecoverTask(ctxT(t), other)
	wantErr(t, err, errFull)
	if !strings.Contains(err.Error(), `"r1"`) {
		t.Fatalf("error does not name the task: %v", err)
	}
}
