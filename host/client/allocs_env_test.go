package client

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/builtin/drivers"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/taskdrivers"
)

// This test binary stands in for berth: re-executed with `builtin driver
// NAME` it serves a built-in driver; with clientEnv set it is a client
// process (see runClientProcess).
func TestMain(m *testing.M) {
	drivers.MainIfRequested(os.Args)
	runClientProcessIfRequested()
	os.Exit(m.Run())
}

var errUnavailable = status.Error(codes.Unavailable, "fake server: unavailable")

const generous = 60 * time.Second

// node is a client with a driver manager (mock, raw_exec) and a state DB
// in dataDir, talking to one server.
type node struct {
	dataDir string
	db      *state.DB
	m       *taskdrivers.Manager
	c       *Client
}

// startNode starts a client on dataDir. stopTasks makes its shutdown stop
// the tasks (the manager's StopTasksOnShutdown), for tests that do not
// restart it.
func startNode(dataDir, server string, logger hclog.Logger, stopTasks bool) (*node, error) {
	db, m, err := startDrivers(dataDir, logger, stopTasks)
	if err != nil {
		return nil, err
	}
	c, err := New(Config{DataDir: dataDir, NodeName: "node-one", Servers: []string{server}, Logger: logger,
		Drivers: m.DriverInfos, DriversChanged: m.Changed(), TaskDrivers: ManagerDrivers(m), State: db,
		Meta: map[string]string{"rack": "r1"}})
	if err != nil {
		return nil, err
	}
	return &node{dataDir: dataDir, db: db, m: m, c: c}, nil
}

// driversFor opens a state DB and starts a driver manager in dataDir for
// the test, stopping them (and their tasks) when it ends.
func driversFor(t *testing.T, dataDir string) (*state.DB, *taskdrivers.Manager) {
	t.Helper()
	db, m, err := startDrivers(dataDir, testutil.Logger(t), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Shutdown(context.Background())
		db.Close()
	})
	return db, m
}

// startDrivers opens the state DB and starts a driver manager (mock and
// raw_exec, and the extra plugins configured) on it.
func startDrivers(dataDir string, logger hclog.Logger, stopTasks bool, extra ...taskdrivers.PluginConfig) (*state.DB, *taskdrivers.Manager, error) {
	db, err := state.Open(state.Path(dataDir))
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*state.DB, *taskdrivers.Manager, error) {
		db.Close()
		return nil, nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	plugins, err := taskdrivers.Catalog(taskdrivers.CatalogConfig{Executable: exe, Builtins: drivers.Plugins(), Dev: true,
		Plugins: append([]taskdrivers.PluginConfig{{Name: "raw_exec", JSON: []byte(`{"enabled": true}`), Source: "test"}}, extra...)})
	if err != nil {
		return fail(err)
	}
	m, err := taskdrivers.New(taskdrivers.Config{Plugins: plugins, Store: db, Options: pluginsup.Options{Logger: logger.Named("drivers")}, StopTasksOnShutdown: stopTasks})
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		m.Shutdown(context.Background())
		return fail(err)
	}
	return db, m, nil
}

func newNode(t *testing.T, dataDir, server string, stopTasks bool) *node {
	t.Helper()
	n, err := startNode(dataDir, server, testutil.Logger(t), stopTasks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

// stop stops the client gracefully: tasks keep running unless the
// manager stops them.
func (n *node) stop() {
	if n.c == nil {
		return
	}
	n.c.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	n.m.Shutdown(ctx)
	n.db.Close()
	n.c = nil
}

func mockJob(typ pb.JobType, tasks ...*pb.Task) *pb.Job {
	return &pb.Job{Id: "web", Name: "web", Type: typ, Version: 1,
		Groups: []*pb.TaskGroup{{Name: "g", Count: 1, Tasks: tasks,
			Restart: &pb.RestartPolicy{Attempts: 1, IntervalMs: 60_000, DelayMs: 10, Mode: pb.RestartMode_RESTART_MODE_FAIL}}}}
}

func allocOf(id string, j *pb.Job) *pb.Allocation {
	return &pb.Allocation{Id: id, Name: j.GetId() + ".g[0]", JobId: j.GetId(), JobVersion: j.GetVersion(), TaskGroup: "g",
		DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN}
}

// sleeper is a raw_exec task that runs until killed.
func sleeper(name string) *pb.Task {
	return &pb.Task{Name: name, Driver: "raw_exec", KillTimeoutMs: 2000, Config: sdk.ConfigMap{
		"command": sdk.StringValue("/bin/sh"),
		"args":    sdk.ListValue("-c", `echo "hello from $BERTH_TASK_NAME"; while true; do sleep 0.05; done`)}}
}

// waitReported waits until the server has a status update of alloc id
// that satisfies ok.
func waitReported(t *testing.T, f *fakeServer, id string, ok func(*pb.AllocClientUpdate) bool) *pb.AllocClientUpdate {
	t.Helper()
	var u *pb.AllocClientUpdate
	testutil.WaitFor(t, generous, func() error {
		u = f.lastUpdate(id)
		if u == nil || !ok(u) {
			return fmt.Errorf("alloc %s: last reported %v", id, u)
		}
		return nil
	})
	return u
}

func status_(st pb.AllocClientStatus) func(*pb.AllocClientUpdate) bool {
	return func(u *pb.AllocClientUpdate) bool { return u.GetClientStatus() == st }
}

// taskPid returns the pid of a running raw_exec task from the driver.
// persistedRunning reports whether the state DB holds a running attempt of
// the task (what taskPid reads).
func persistedRunning(n *node, allocID, task string) error {
	states, err := n.db.TaskStates(allocID)
	if err != nil {
		return err
	}
	for _, ts := range states {
		if ts.GetTask() == task && ts.GetTaskId() != "" &&
			ts.GetState().GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
			return nil
		}
	}
	return fmt.Errorf("no running attempt of task %s of alloc %s in the state db yet", task, allocID)
}

func taskPid(t *testing.T, n *node, allocID, task string) int {
	t.Helper()
	// The runner shows (and reports) an attempt running a moment before
	// the state DB records it.
	testutil.WaitFor(t, generous, func() error { return persistedRunning(n, allocID, task) })
	rec, ok, err := n.db.Alloc(allocID)
	if err != nil || !ok {
		t.Fatalf("alloc %s not in the state db: %v", allocID, err)
	}
	_ = rec
	states, err := n.db.TaskStates(allocID)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range states {
		if ts.GetTask() != task || ts.GetTaskId() == "" {
			continue
		}
		d, err := n.m.Driver(ts.GetDriver())
		if err != nil {
			t.Fatal(err)
		}
		st, err := d.InspectTask(context.Background(), ts.GetTaskId())
		if err != nil {
			t.Fatalf("InspectTask(%s): %v", ts.GetTaskId(), err)
		}
		pid, err := strconv.Atoi(st.GetAttributes()["pid"])
		if err != nil {
			t.Fatalf("task %s has no pid: %v", ts.GetTaskId(), st)
		}
		return pid
	}
	t.Fatalf("task %s of alloc %s has no running attempt: %v", task, allocID, states)
	return 0
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	for i := len(s) - 1; i > 0; i-- {
		if s[i] == ')' {
			return i+2 < len(s) && s[i+2] != 'Z'
		}
	}
	return false
}

// killAtEnd kills a task's process group if the test leaves it behind.
func killAtEnd(t *testing.T, pid int) {
	t.Cleanup(func() {
		if alive(pid) {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
}
