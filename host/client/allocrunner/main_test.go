package allocrunner

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/builtin/drivers"
	"berth.dev/berth/builtin/drivers/mock"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/internal/taskenv"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/taskdrivers"
)

// The test binary stands in for berth: re-executed with `builtin driver
// NAME` it serves a built-in driver over go-plugin.
func TestMain(m *testing.M) {
	drivers.MainIfRequested(os.Args)
	os.Exit(m.Run())
}

const generous = 60 * time.Second

// env is a driver manager (mock and raw_exec, real plugin processes) over
// a state DB in a fresh data dir.
type env struct {
	t       *testing.T
	dataDir string
	db      *state.DB
	m       *taskdrivers.Manager
}

type drivers_ struct{ m *taskdrivers.Manager }

func (d drivers_) Driver(name string) (taskrunner.Driver, error) {
	drv, err := d.m.Driver(name)
	if err != nil {
		return nil, err
	}
	return drv, nil
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	db, err := state.Open(state.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	plugins, err := taskdrivers.Catalog(taskdrivers.CatalogConfig{Executable: exe, Builtins: drivers.Plugins(), Dev: true,
		Plugins: []taskdrivers.PluginConfig{{Name: "raw_exec", JSON: []byte(`{"enabled": true}`), Source: "test"}}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := taskdrivers.New(taskdrivers.Config{Plugins: plugins, Store: db, Options: pluginsup.Options{Logger: testutil.Logger(t)}, StopTasksOnShutdown: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Shutdown(context.Background())
		db.Close()
	})
	return &env{t: t, dataDir: dir, db: db, m: m}
}

// updates records what a runner reports.
type updates struct {
	mu  sync.Mutex
	all []*pb.AllocClientUpdate
}

func (u *updates) add(up *pb.AllocClientUpdate) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.all = append(u.all, up)
}

func (u *updates) statuses() []pb.AllocClientStatus {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []pb.AllocClientStatus
	for _, up := range u.all {
		if len(out) == 0 || out[len(out)-1] != up.GetClientStatus() {
			out = append(out, up.GetClientStatus())
		}
	}
	return out
}

// job is a one-group job of tasks.
func job(typ pb.JobType, restart *pb.RestartPolicy, tasks ...*pb.Task) (*pb.Allocation, *pb.Job) {
	j := &pb.Job{Id: "j1", Name: "j1", Type: typ, Version: 3,
		Groups: []*pb.TaskGroup{{Name: "g", Count: 1, Restart: restart, Tasks: tasks}}}
	a := &pb.Allocation{Id: "a1-" + fmt.Sprint(time.Now().UnixNano()), Name: "j1.g[0]", JobId: "j1", JobVersion: 3, TaskGroup: "g",
		NodeId: "n1", DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN, AllocModifyIndex: 10}
	return a, j
}

// runner builds and runs an alloc runner.
func (e *env) runner(a *pb.Allocation, j *pb.Job, tweak func(*Config)) (*AllocRunner, *updates) {
	e.t.Helper()
	ar, u := e.newRunner(a, j, tweak)
	go ar.Run()
	return ar, u
}

// newRunner builds an alloc runner without running it; the test's
// cleanup kills it.
func (e *env) newRunner(a *pb.Allocation, j *pb.Job, tweak func(*Config)) (*AllocRunner, *updates) {
	e.t.Helper()
	u := &updates{}
	cfg := Config{Alloc: a, Job: j, DataDir: e.dataDir, Node: taskenv.Node{ID: "n1", Name: "node-one"},
		Drivers: drivers_{e.m}, Store: e.db, OnUpdate: u.add, Logger: testutil.Logger(e.t)}
	if tweak != nil {
		tweak(&cfg)
	}
	ar, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		ar.Kill(ctx)
	})
	return ar, u
}

func waitDone(t *testing.T, ar *AllocRunner) {
	t.Helper()
	select {
	case <-ar.Done():
	case <-time.After(generous):
		t.Fatalf("alloc %s not done: %v", ar.ID(), ar.TaskStates())
	}
}

func waitTask(t *testing.T, ar *AllocRunner, task string, ok func(*pb.TaskState) bool) *pb.TaskState {
	t.Helper()
	var st *pb.TaskState
	testutil.WaitFor(t, generous, func() error {
		st = ar.TaskStates()[task]
		if !ok(st) {
			return fmt.Errorf("task %s: %v", task, st)
		}
		return nil
	})
	return st
}

func isRunning(st *pb.TaskState) bool {
	return st.GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING
}

func eventTypes(st *pb.TaskState) []string {
	var out []string
	for _, ev := range st.GetEvents() {
		out = append(out, ev.GetType())
	}
	return out
}

func event(st *pb.TaskState, typ string) *pb.TaskEvent {
	for _, ev := range st.GetEvents() {
		if ev.GetType() == typ {
			return ev
		}
	}
	return nil
}

func proto_clone(a *pb.Allocation) *pb.Allocation { return proto.Clone(a).(*pb.Allocation) }

func mockMounts(st *driverpb.TaskStatus) ([]*driverpb.Mount, error) { return mock.Mounts(st) }

func waitFor(t *testing.T, cond func() error) {
	t.Helper()
	testutil.WaitFor(t, generous, cond)
}
