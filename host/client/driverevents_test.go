package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"berth.dev/berth/host/client/allocrunner"
	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/taskdrivers"
)

// runningTaskID waits for the state db to record the running attempt of
// the task and returns its driver task ID.
func runningTaskID(t *testing.T, n *node, allocID, task string) string {
	t.Helper()
	var id string
	testutil.WaitFor(t, generous, func() error {
		states, err := n.db.TaskStates(allocID)
		if err != nil {
			return err
		}
		for _, ts := range states {
			if ts.GetTask() == task && ts.GetTaskId() != "" &&
				ts.GetState().GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
				id = ts.GetTaskId()
				return nil
			}
		}
		return errors.New("no running attempt in the state db yet")
	})
	return id
}

// reportedDriverEvent returns the "Driver" event with message msg among
// the task's events in the servers' last update of the alloc, nil if none.
func reportedDriverEvent(f *fakeServer, allocID, task, msg string) *pb.TaskEvent {
	for _, ev := range f.lastUpdate(allocID).GetTaskStates()[task].GetEvents() {
		if ev.GetType() == taskrunner.DriverEventType && ev.GetMessage() == msg {
			return ev
		}
	}
	return nil
}

// signalUntilReported signals the task until the driver's event about the
// signal ("received <sig>") reaches the servers: the client's subscription
// may not be up yet when the first signal's event is emitted.
func signalUntilReported(t *testing.T, f *fakeServer, n *node, allocID, task, id, sig string) *pb.TaskEvent {
	t.Helper()
	d, err := n.m.Driver("mock")
	if err != nil {
		t.Fatal(err)
	}
	var ev *pb.TaskEvent
	testutil.WaitFor(t, generous, func() error {
		if ev = reportedDriverEvent(f, allocID, task, "received "+sig); ev != nil {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		if err := d.SignalTask(ctx, id, sig); err != nil {
			return fmt.Errorf("signal: %w", err)
		}
		return fmt.Errorf("no driver event %q reported yet: %v", "received "+sig, f.lastUpdate(allocID).GetTaskStates()[task].GetEvents())
	})
	return ev
}

// An event the driver emits about a running task (the mock driver's
// "received SIGUSR1") is recorded as the task's "Driver" event, with the
// driver's annotations as its details, and reaches the servers in the
// alloc's update; events of tasks the client does not run (started on the
// driver by someone else, or another attempt ID of a task of one of its
// allocs) are dropped.
func TestDriverEventsReachTheServers(t *testing.T) {
	f := newFakeServer(t)
	n := newNode(t, t.TempDir(), f.addr, true)
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "web", Driver: "mock", KillTimeoutMs: 1000})
	f.place(allocOf("a1", j), j)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	id := runningTaskID(t, n, "a1", "web")

	ev := signalUntilReported(t, f, n, "a1", "web", id, "SIGUSR1")
	if got := ev.GetDetails()["signal"]; got != "SIGUSR1" || ev.GetFailed() || ev.GetOccurredAt() == 0 {
		t.Fatalf("driver event %v: want the annotation signal=SIGUSR1 as a detail, a time, not failed", ev)
	}

	// Tasks this client does not run: one of no alloc of it, one with
	// the ID of an attempt of a1's task that is not its attempt.
	d, err := n.m.Driver("mock")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	for _, stray := range []string{"stray.web.00000001", "a1.web.00000002"} {
		if _, err := d.StartTask(ctx, &driverpb.TaskConfig{Id: stray, Name: "web", TaskDir: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		if err := d.SignalTask(ctx, stray, "SIGUSR2"); err != nil {
			t.Fatal(err)
		}
	}
	// The strays' events were emitted, and so routed, before this one.
	if err := d.SignalTask(ctx, id, "SIGWINCH"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, generous, func() error {
		if reportedDriverEvent(f, "a1", "web", "received SIGWINCH") == nil {
			return errors.New("SIGWINCH event not reported yet")
		}
		return nil
	})
	for task, st := range f.lastUpdate("a1").GetTaskStates() {
		for _, ev := range st.GetEvents() {
			if ev.GetMessage() == "received SIGUSR2" {
				t.Fatalf("task %s got the event of a task the client does not run: %v", task, ev)
			}
		}
	}
}

// A driver plugin that dies is restarted by the driver manager; the
// client subscribes to the new plugin's events, so an event emitted after
// the restart still reaches the task.
func TestDriverEventsFollowAPluginRestart(t *testing.T) {
	f := newFakeServer(t)
	n := newNode(t, t.TempDir(), f.addr, true)
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "web", Driver: "mock", KillTimeoutMs: 1000})
	f.place(allocOf("a1", j), j)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	id := runningTaskID(t, n, "a1", "web")
	signalUntilReported(t, f, n, "a1", "web", id, "SIGUSR1")

	pid, err := mockPluginPid(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, generous, func() error {
		if p, err := mockPluginPid(n); err != nil || p == pid {
			return fmt.Errorf("the mock plugin (pid %d) is not restarted yet: %v", pid, err)
		}
		return nil
	})
	signalUntilReported(t, f, n, "a1", "web", id, "SIGUSR2")
	if st := f.lastUpdate("a1").GetTaskStates()["web"]; st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
		t.Fatalf("task state after the plugin restart: %v", st)
	}
}

// mockPluginPid is the pid of the running mock plugin, from its reattach
// record.
func mockPluginPid(n *node) (int, error) {
	rec, ok, err := n.db.DriverPlugin("mock")
	if err != nil || !ok || rec.GetReattach().GetPid() <= 0 {
		return 0, fmt.Errorf("mock plugin record: %v, %t, %v", rec, ok, err)
	}
	return int(rec.GetReattach().GetPid()), nil
}

// The exec driver's "OOM killed" event about a task the kernel killed
// for outgrowing its memory limit reaches the task's events.
func TestExecDriverOOMEventReachesTheTask(t *testing.T) {
	testutil.RequireRoot(t, "the exec driver isolates tasks with namespaces, mounts and cgroups")
	f := newFakeServer(t)
	dir := t.TempDir()
	db, m, err := startDrivers(dir, testutil.Logger(t), true,
		taskdrivers.PluginConfig{Name: "exec", JSON: []byte(`{"enabled": true}`), Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{DataDir: dir, NodeName: "node-one", Servers: []string{f.addr}, Logger: testutil.Logger(t),
		Drivers: m.DriverInfos, DriversChanged: m.Changed(), TaskDrivers: ManagerDrivers(m), State: db})
	if err != nil {
		m.Shutdown(context.Background())
		db.Close()
		t.Fatal(err)
	}
	n := &node{dataDir: dir, db: db, m: m, c: c}
	t.Cleanup(n.stop)

	// The task waits for SIGUSR1, then fills its memory: tail keeps a
	// line that never ends, and /dev/zero has no newline.
	task := &pb.Task{Name: "hog", Driver: "exec", KillTimeoutMs: 1000,
		Resources: &pb.TaskResources{MemoryMb: 32},
		Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/sh"),
			"args": sdk.ListValue("-c", `trap 'exec tail /dev/zero' USR1; while :; do sleep 0.05; done`)}}
	j := mockJob(pb.JobType_JOB_TYPE_BATCH, task)
	j.Groups[0].Restart.Attempts = 0
	f.place(allocOf("a1", j), j)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	id := runningTaskID(t, n, "a1", "hog")
	d, err := m.Driver("exec")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	// Once the client's subscription is up (the driver's "sent SIGWINCH"
	// shows), the task is set off.
	testutil.WaitFor(t, generous, func() error {
		if reportedDriverEvent(f, "a1", "hog", "sent SIGWINCH") != nil {
			return nil
		}
		if err := d.SignalTask(ctx, id, "SIGWINCH"); err != nil {
			return err
		}
		return errors.New("no driver event about SIGWINCH reported yet")
	})
	if err := d.SignalTask(ctx, id, "SIGUSR1"); err != nil {
		t.Fatal(err)
	}
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED))
	// The event may be recorded after the runner's own of the exit: it
	// goes before them, in time order.
	testutil.WaitFor(t, generous, func() error {
		evs := f.lastUpdate("a1").GetTaskStates()["hog"].GetEvents()
		var order []string
		for _, ev := range evs {
			switch {
			case ev.GetMessage() == "OOM killed" && ev.GetDetails()["oom_killed"] == "true":
				order = append(order, "oom")
			case ev.GetType() == "Terminated":
				order = append(order, "terminated")
			}
		}
		if !slices.Equal(order, []string{"oom", "terminated"}) {
			return fmt.Errorf("want an OOM driver event (oom_killed=true) before Terminated; events %v", evs)
		}
		return nil
	})
}

// The backlog between a driver's stream and the routing keeps the newest
// driverEventBacklog events, dropping (and counting) the oldest.
func TestEventRingDropsTheOldest(t *testing.T) {
	r := newEventRing(4)
	for i := range 6 {
		r.push(&driverpb.TaskEvent{Message: fmt.Sprint(i)})
	}
	done := make(chan struct{})
	ev, dropped, ok := r.next(done)
	if !ok || ev.GetMessage() != "2" || dropped != 2 {
		t.Fatalf("first: %v, dropped %d, %t; want event 2 after 2 dropped", ev, dropped, ok)
	}
	ev, dropped, _ = r.next(done)
	if ev.GetMessage() != "3" || dropped != 0 || r.droppedTotal() != 2 {
		t.Fatalf("second: %v, dropped %d (total %d)", ev, dropped, r.droppedTotal())
	}
	r.next(done)
	r.next(done)
	close(done)
	if _, _, ok := r.next(done); ok {
		t.Fatal("next on an empty ring after done returned an event")
	}
}

// floodSource is a driver whose stream yields n events at once, counting
// those taken, then waits for the end.
type floodSource struct {
	n     int
	taken atomic.Int64
}

func (s *floodSource) EventDrivers() []string { return []string{"flood"} }

func (s *floodSource) TaskEvents(ctx context.Context, _ string) iter.Seq2[*driverpb.TaskEvent, error] {
	return func(yield func(*driverpb.TaskEvent, error) bool) {
		for i := range s.n {
			if !yield(&driverpb.TaskEvent{TaskId: fmt.Sprintf("a%d.web.0001", i%7), Message: "progress"}, nil) {
				return
			}
			s.taken.Add(1)
		}
		<-ctx.Done()
	}
}

// Routing that waits (the alloc map held, as while new allocs' runners
// are built) does not hold up the driver's stream: it is read on into the
// bounded backlog.
func TestDriverStreamIsNotHeldUpByRouting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{ctx: ctx, logger: testutil.Logger(t), allocs: &allocRuntime{runners: map[string]*allocrunner.AllocRunner{}}}
	src := &floodSource{n: 3 * driverEventBacklog}
	c.allocs.mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.followDriverEvents(src, "flood")
	}()
	testutil.WaitFor(t, generous, func() error {
		if n := src.taken.Load(); n != int64(src.n) {
			return fmt.Errorf("%d of %d events read from the stream", n, src.n)
		}
		return nil
	})
	c.allocs.mu.Unlock()
	cancel()
	<-done
}
