package volumehooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/internal/allocdir"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// pluginDriver runs "plugin tasks": a start calls onStart with the task's
// config (to serve a fake plugin at its CSI_ENDPOINT, say); a task runs
// until stopped.
type pluginDriver struct {
	onStart func(*driverpb.TaskConfig)

	mu     sync.Mutex
	starts []*driverpb.TaskConfig
	exits  map[string]chan *driverpb.ExitResult
}

var _ taskrunner.Driver = (*pluginDriver)(nil)

func (d *pluginDriver) ch(id string) chan *driverpb.ExitResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.exits == nil {
		d.exits = map[string]chan *driverpb.ExitResult{}
	}
	if d.exits[id] == nil {
		d.exits[id] = make(chan *driverpb.ExitResult, 1)
	}
	return d.exits[id]
}

func (d *pluginDriver) StartTask(_ context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	d.mu.Lock()
	d.starts = append(d.starts, cfg)
	d.mu.Unlock()
	d.ch(cfg.GetId())
	if d.onStart != nil {
		d.onStart(cfg)
	}
	return &driverpb.TaskHandle{Driver: "raw_exec", Config: cfg}, nil
}

func (d *pluginDriver) WaitTask(ctx context.Context, id string) (*driverpb.ExitResult, error) {
	select {
	case r := <-d.ch(id):
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (d *pluginDriver) StopTask(_ context.Context, id string, _ time.Duration, _ string) error {
	select {
	case d.ch(id) <- &driverpb.ExitResult{ExitCode: 143, Signal: 15}:
	default:
	}
	return nil
}

func (d *pluginDriver) DestroyTask(context.Context, string, bool) error { return nil }
func (d *pluginDriver) RecoverTask(context.Context, *driverpb.TaskHandle) error {
	return errors.New("not recoverable")
}

func (d *pluginDriver) started() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.starts)
}

// runPluginTask runs a plugin task in a real task runner with the
// supervisor hook, as an alloc runner would.
func runPluginTask(t *testing.T, task *pb.Task, d *pluginDriver, reg *registry.Registry, dataDir string) *taskrunner.TaskRunner {
	t.Helper()
	ad, err := allocdir.New(t.TempDir(), allocID)
	if err != nil {
		t.Fatal(err)
	}
	td, err := ad.TaskDir(task.GetName())
	if err != nil {
		t.Fatal(err)
	}
	alloc := &pb.Allocation{Id: allocID, CreateIndex: 7}
	f := NewCSIPluginSupervisor(SupervisorConfig{DataDir: dataDir, Registry: reg, Logger: testutil.Logger(t),
		HealthInterval: 10 * time.Millisecond, StartProbeInterval: 5 * time.Millisecond, MaxStartProbeInterval: 20 * time.Millisecond})
	tr := taskrunner.New(taskrunner.Config{
		Info:   runhooks.TaskInfo{Alloc: alloc, Job: &pb.Job{Id: "plugins"}, Group: &pb.TaskGroup{Name: "g"}, Task: task, Dir: td},
		Driver: d, Hooks: []runhooks.Hook{f(runhooks.AllocInfo{Alloc: alloc}, task)},
		// Two failures allowed in a minute, then the task fails.
		Restart: &pb.RestartPolicy{Attempts: 1, IntervalMs: 60_000, DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_FAIL},
		JobType: pb.JobType_JOB_TYPE_SERVICE, Logger: testutil.Logger(t),
	})
	go tr.Run()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tr.Kill(ctx, "test over")
	})
	return tr
}

func eventTypes(st *pb.TaskState) []string {
	var out []string
	for _, ev := range st.GetEvents() {
		out = append(out, ev.GetType())
	}
	return out
}

// In a real task runner, a plugin that never becomes healthy is restarted
// per the restart policy — once (attempts = 1), then the task fails — and
// never registered.
func TestRunnerRestartsANeverHealthyPlugin(t *testing.T) {
	reg := registry.New(newMemStore())
	d := &pluginDriver{} // the "plugin" never creates its socket
	tr := runPluginTask(t, pluginTask("node", 100*time.Millisecond), d, reg, shortDir(t))
	select {
	case <-tr.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("task still running: %v", tr.State())
	}
	st := tr.State()
	if !st.GetFailed() || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || d.started() != 2 {
		t.Fatalf("state %v after %d starts: want dead and failed after 2", st, d.started())
	}
	// A task state keeps its last 10 events: the first timeout's has
	// scrolled off by now, its restart has not.
	got := strings.Join(eventTypes(st), ", ")
	for _, want := range []string{
		"Restart Signaled, Killing, Terminated, Restarting, Started, " +
			EventPluginHealthTimeout + ", Restart Signaled, Killing, Terminated, Not Restarting",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("events %q lack %q", got, want)
		}
	}
	for _, ev := range st.GetEvents() {
		if ev.GetType() == "Restart Signaled" && (ev.GetDetails()["failure"] != "true" ||
			!strings.Contains(ev.GetMessage(), `CSI plugin "hostpath" did not become healthy within 100ms: no socket at`)) {
			t.Errorf("restart event %v: want the supervisor's reason, as a failure", ev)
		}
	}
	if es := reg.List(pb.CSIPluginType_CSI_PLUGIN_TYPE_UNSPECIFIED); len(es) != 0 {
		t.Errorf("registry %v", es)
	}
}

// In a real task runner the plugin gets its CSI_ENDPOINT, is registered
// once it serves there, and is deregistered when the task is killed.
func TestRunnerRegistersAndDeregistersAPlugin(t *testing.T) {
	reg := registry.New(newMemStore())
	var srvs []*csifake.Server
	var mu sync.Mutex
	d := &pluginDriver{onStart: func(cfg *driverpb.TaskConfig) {
		path, err := csi.ParseEndpoint(cfg.GetEnv()[EnvEndpoint])
		if err != nil {
			t.Errorf("CSI_ENDPOINT %q: %v", cfg.GetEnv()[EnvEndpoint], err)
			return
		}
		srv, err := csifake.New().Listen(path)
		if err != nil {
			t.Errorf("serving the plugin at its CSI_ENDPOINT: %v", err)
			return
		}
		mu.Lock()
		srvs = append(srvs, srv)
		mu.Unlock()
	}}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range srvs {
			s.Stop()
		}
	})
	dataDir := shortDir(t)
	tr := runPluginTask(t, pluginTask("controller", time.Minute), d, reg, dataDir)
	testutil.WaitFor(t, 10*time.Second, func() error {
		e, ok := reg.Serving(pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER, "hostpath")
		if !ok || !e.Registration.GetHealthy() {
			return fmt.Errorf("not registered healthy: %v", e.Registration)
		}
		if e.Registration.GetEndpoint() != "unix://"+PluginSocket(dataDir, allocID, "plugin") || e.Registration.GetAllocCreateIndex() != 7 {
			return fmt.Errorf("registration %v", e.Registration)
		}
		return nil
	})
	if got := eventTypes(tr.State()); !containsStr(got, EventPluginHealthy) {
		t.Errorf("events %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Kill(ctx, "job stopped"); err != nil {
		t.Fatal(err)
	}
	if es := reg.List(pb.CSIPluginType_CSI_PLUGIN_TYPE_UNSPECIFIED); len(es) != 0 {
		t.Errorf("registry after the task was killed: %v", es)
	}
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
