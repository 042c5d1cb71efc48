package volumehooks

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

var _ Registry = (*registry.Registry)(nil)

// memStore is a registry.Store in memory.
type memStore struct {
	mu   sync.Mutex
	recs map[registry.Key]*pb.CSIPluginRegistration
}

func newMemStore(recs ...*pb.CSIPluginRegistration) *memStore {
	s := &memStore{recs: map[registry.Key]*pb.CSIPluginRegistration{}}
	_ = s.PutCSIPluginRegistrations(recs...)
	return s
}

func (s *memStore) CSIPluginRegistrations() ([]*pb.CSIPluginRegistration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.CSIPluginRegistration
	for _, r := range s.recs {
		out = append(out, r)
	}
	return out, nil
}

func (s *memStore) PutCSIPluginRegistrations(regs ...*pb.CSIPluginRegistration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range regs {
		s.recs[registry.Entry{Registration: r}.Key()] = r
	}
	return nil
}

func (s *memStore) DeleteCSIPluginRegistrations(regs ...*pb.CSIPluginRegistration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range regs {
		delete(s.recs, registry.Entry{Registration: r}.Key())
	}
	return nil
}

// eventLog is a runhooks.Emitter that keeps every event.
type eventLog struct {
	mu     sync.Mutex
	events []*pb.TaskEvent
}

func (l *eventLog) EmitEvent(ev *pb.TaskEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
}

func (l *eventLog) all() []*pb.TaskEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

func (l *eventLog) ofType(typ string) []*pb.TaskEvent {
	var out []*pb.TaskEvent
	for _, ev := range l.all() {
		if ev.GetType() == typ {
			out = append(out, ev)
		}
	}
	return out
}

// waitEvents waits until n events of typ were emitted and returns them.
func (l *eventLog) waitEvents(t *testing.T, typ string, n int) []*pb.TaskEvent {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if got := len(l.ofType(typ)); got < n {
			return fmt.Errorf("%d %q events, want %d; all: %v", got, typ, n, l.all())
		}
		return nil
	})
	return l.ofType(typ)
}

// restartCall is one Lifecycle.Restart.
type restartCall struct {
	taskID, reason string
	failure        bool
}

// fakeLifecycle records restarts.
type fakeLifecycle struct {
	mu    sync.Mutex
	calls []restartCall
}

func (f *fakeLifecycle) Restart(taskID, reason string, failure bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, restartCall{taskID, reason, failure})
	return nil
}

func (f *fakeLifecycle) restarts() []restartCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// mounts is a runhooks.MountsHonourer with a fixed answer.
type mounts bool

func (m mounts) HonoursMounts(context.Context) (bool, error) { return bool(m), nil }

// shortDir returns a fresh directory with a short path, so plugin sockets
// under it fit a unix socket address (t.TempDir's may not).
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// pluginTask is a raw_exec task with a csi_plugin block.
func pluginTask(typ string, healthTimeout time.Duration) *pb.Task {
	return &pb.Task{Name: "plugin", Driver: "raw_exec", CsiPlugin: &pb.CSIPluginConfig{
		Id: "hostpath", Type: typ, MountDir: "/csi", StagePublishBaseDir: "/local/csi",
		HealthTimeoutMs: healthTimeout.Milliseconds(),
	}}
}

// env is one plugin task's supervisor hook with fakes around it.
type env struct {
	t       testing.TB
	dataDir string
	reg     *registry.Registry
	events  *eventLog
	life    *fakeLifecycle
	hook    *supervisorHook
	info    runhooks.TaskInfo
}

const allocID = "0b5c1e7a-4a39-4f3e-9d6b-2f0c1a8e9d11"

func newEnv(t *testing.T, task *pb.Task, tweak func(*SupervisorConfig)) *env {
	t.Helper()
	e := &env{t: t, dataDir: shortDir(t), events: &eventLog{}, life: &fakeLifecycle{}}
	e.reg = registry.New(newMemStore())
	e.build(task, tweak)
	return e
}

// build makes the hook through the factory, as an alloc runner does.
func (e *env) build(task *pb.Task, tweak func(*SupervisorConfig)) {
	cfg := SupervisorConfig{
		DataDir: e.dataDir, Registry: e.reg, Logger: testutil.Logger(e.t),
		HealthInterval: 10 * time.Millisecond, StartProbeInterval: 5 * time.Millisecond,
		MaxStartProbeInterval: 20 * time.Millisecond, CallTimeout: 5 * time.Second,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	alloc := &pb.Allocation{Id: allocID, CreateIndex: 42}
	h := NewCSIPluginSupervisor(cfg)(runhooks.AllocInfo{Alloc: alloc}, task)
	if h == nil {
		e.t.Fatal("no hook for a task with a csi_plugin block")
	}
	e.hook = h.(*supervisorHook)
	e.info = runhooks.TaskInfo{Alloc: alloc, Job: &pb.Job{Id: "plugins"}, Group: &pb.TaskGroup{Name: "g"}, Task: task,
		Events: e.events, Lifecycle: e.life, Driver: mounts(false)}
}

func (e *env) prestart(recovered bool) (*runhooks.PrestartResponse, error) {
	var resp runhooks.PrestartResponse
	err := e.hook.Prestart(context.Background(), &runhooks.PrestartRequest{TaskInfo: e.info, Recovered: recovered, Attempt: 1}, &resp)
	return &resp, err
}

// start runs prestart and poststart of attempt taskID.
func (e *env) start(taskID string, recovered bool) {
	e.t.Helper()
	if _, err := e.prestart(recovered); err != nil {
		e.t.Fatal(err)
	}
	if err := e.hook.Poststart(context.Background(), &runhooks.PoststartRequest{TaskInfo: e.info, TaskID: taskID, Recovered: recovered}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.hook.stopSupervisor(context.Background()) })
}

// serve runs the fake plugin on the alloc's plugin socket.
func (e *env) serve(p *csifake.Plugin) *csifake.Server {
	e.t.Helper()
	if err := os.MkdirAll(PluginDir(e.dataDir, allocID, "plugin"), 0o755); err != nil {
		e.t.Fatal(err)
	}
	srv, err := p.Listen(PluginSocket(e.dataDir, allocID, "plugin"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(srv.Stop)
	return srv
}

// entries lists the registry's entries as "type plugin alloc healthy".
func (e *env) entries() []string {
	var out []string
	for _, en := range e.reg.List(pb.CSIPluginType_CSI_PLUGIN_TYPE_UNSPECIFIED) {
		r := en.Registration
		out = append(out, fmt.Sprintf("%s %s %s healthy=%t needs_probe=%t", r.GetType(), r.GetPluginId(), r.GetAllocId(), r.GetHealthy(), en.NeedsProbe))
	}
	return out
}

// waitEntries waits until the registry lists want.
func (e *env) waitEntries(want ...string) {
	e.t.Helper()
	testutil.WaitFor(e.t, 10*time.Second, func() error {
		if got := e.entries(); !slices.Equal(got, want) {
			return fmt.Errorf("registry %q, want %q", got, want)
		}
		return nil
	})
}
