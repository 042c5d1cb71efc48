package client

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/host/client/allocrunner"
	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// An alloc placed on the node runs and is reported running; stopped by
// the servers it is killed and reported complete; no longer sent it is
// destroyed (its dir and its records gone).
func TestWatcherRunsStopsAndDestroysAllocs(t *testing.T) {
	f := newFakeServer(t)
	n := newNode(t, t.TempDir(), f.addr, true)
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "web", Driver: "mock", KillTimeoutMs: 1000})
	f.place(allocOf("a1", j), j)
	u := waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	if ev := u.GetTaskStates()["web"].GetEvents(); len(ev) == 0 || ev[0].GetType() != "Received" {
		t.Fatalf("reported task events %v", ev)
	}
	r, err := n.c.runner("a1")
	if err != nil {
		t.Fatal(err)
	}
	dir := r.Dir().Dir
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("alloc dir: %v", err)
	}

	f.stop("a1")
	u = waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE))
	if st := u.GetTaskStates()["web"]; st.GetFailed() || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		t.Fatalf("task after stop: %v", st)
	}

	f.remove("a1")
	testutil.WaitFor(t, generous, func() error {
		if _, err := n.c.runner("a1"); !errors.Is(err, ErrUnknownAlloc) {
			return errors.New("runner still there")
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			return errors.New("alloc dir still there")
		}
		if _, ok, _ := n.db.Alloc("a1"); ok {
			return errors.New("alloc record still there")
		}
		return nil
	})
}

// The watcher is a blocking query: it sends the last index as min_index
// and the allocs it runs as known, and while nothing changes it does not
// ask again (no polling).
func TestWatcherBlocksAndSendsKnownAllocs(t *testing.T) {
	f := newFakeServer(t)
	newNode(t, t.TempDir(), f.addr, true)
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "web", Driver: "mock"})
	f.place(allocOf("a1", j), j)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	var reqs []*pb.ClientAllocsRequest
	testutil.WaitFor(t, generous, func() error {
		reqs = f.watchRequests()
		if len(reqs) == 0 || reqs[len(reqs)-1].GetKnown()["a1"] == 0 {
			return errors.New("no watch with a1 known yet")
		}
		return nil
	})
	last := reqs[len(reqs)-1]
	f.mu.Lock()
	index := f.index
	f.mu.Unlock()
	if last.GetQuery().GetMinIndex() != index || last.GetQuery().GetMaxWaitMs() != WatchMaxWait.Milliseconds() {
		t.Fatalf("watch %v: want min_index %d and max_wait %s", last.GetQuery(), index, WatchMaxWait)
	}
	if last.GetKnown()["a1"] != index {
		t.Fatalf("known %v, want a1 at %d", last.GetKnown(), index)
	}
	// Nothing changes: the one watch under way stays blocked.
	count := len(reqs)
	time.Sleep(300 * time.Millisecond) // a window in which a poll would show
	if got := len(f.watchRequests()); got != count {
		t.Fatalf("%d watches while nothing changed, want none after the %d blocked one(s)", got-count, count)
	}
}

// An alloc the servers send as already terminal is not run. One stopped
// while still pending is reported complete (it never ran; GC collects
// only allocs terminal on their client); one terminal on its client
// already is not reported again.
func TestWatcherDoesNotRunTerminalAllocs(t *testing.T) {
	f := newFakeServer(t)
	n := newNode(t, t.TempDir(), f.addr, true)
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "web", Driver: "mock"})
	stopped := allocOf("gone", j)
	stopped.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP
	done := allocOf("done", j)
	done.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE
	f.place(stopped, j)
	f.place(done, j)
	f.place(allocOf("live", j), j)
	waitReported(t, f, "live", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	waitReported(t, f, "gone", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE))
	for _, id := range []string{"gone", "done"} {
		if _, err := n.c.runner(id); !errors.Is(err, ErrUnknownAlloc) {
			t.Errorf("terminal alloc %s got a runner", id)
		}
	}
	if u := f.lastUpdate("gone"); u.GetClientDescription() != "stopped before the client ran it" || len(u.GetTaskStates()) != 0 {
		t.Errorf("stopped alloc gone reported %v; want complete, never run, no task state", u)
	}
	if f.lastUpdate("done") != nil {
		t.Error("alloc done, complete already, was reported again")
	}
}

// RestartAlloc restarts a task in place: a new attempt, a restart that
// does not count against the policy's attempts, an event saying why.
func TestRestartAlloc(t *testing.T) {
	f := newFakeServer(t)
	n := newNode(t, t.TempDir(), f.addr, true)
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, sleeper("web"))
	f.place(allocOf("a1", j), j)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	before := taskPid(t, n, "a1", "web")
	killAtEnd(t, before)
	if err := n.c.RestartAlloc("a1", "web"); err != nil {
		t.Fatal(err)
	}
	var after int
	testutil.WaitFor(t, generous, func() error {
		_, states, err := n.c.AllocStates("a1")
		if err != nil {
			return err
		}
		if st := states["web"]; st.GetRestarts() != 1 || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
			return errors.New("not restarted yet")
		}
		// And the state DB has the new attempt, which taskPid reads.
		recs, err := n.db.TaskStates("a1")
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.GetTask() == "web" && r.GetState().GetRestarts() == 1 &&
				r.GetState().GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
				return nil
			}
		}
		return errors.New("the restarted attempt is not in the state db yet")
	})
	after = taskPid(t, n, "a1", "web")
	killAtEnd(t, after)
	if after == before || alive(before) {
		t.Fatalf("pid %d before, %d after; old alive: %t", before, after, alive(before))
	}
	_, states, _ := n.c.AllocStates("a1")
	var types []string
	for _, ev := range states["web"].GetEvents() {
		if ev.GetType() != taskrunner.DriverEventType { // the driver's come in their own time
			types = append(types, ev.GetType())
		}
	}
	if !strings.Contains(strings.Join(types, ","), "Restart Signaled,Killing,Terminated,Restarting,Started") {
		t.Fatalf("events %v", types)
	}
	if err := n.c.RestartAlloc("nope", ""); !errors.Is(err, ErrUnknownAlloc) || errcode.Code(err) != codes.NotFound {
		t.Fatalf("unknown alloc: %v", err)
	}
	if err := n.c.RestartAlloc("a1", "nope"); !errors.Is(err, allocrunner.ErrUnknownTask) {
		t.Fatalf("unknown task: %v", err)
	}
}

// LogPaths finds a task's stdout files (the only task when none is named).
func TestLogPaths(t *testing.T) {
	f := newFakeServer(t)
	n := newNode(t, t.TempDir(), f.addr, true)
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, sleeper("web"))
	f.place(allocOf("a1", j), j)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	killAtEnd(t, taskPid(t, n, "a1", "web"))
	testutil.WaitFor(t, generous, func() error {
		logs, err := n.c.LogPaths("a1", "")
		if err != nil {
			return err
		}
		files, err := logs.Files(false)
		if err != nil {
			return err
		}
		if len(files) == 0 {
			return errors.New("no log files")
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "hello from web") {
			return errors.New("stdout does not hold the task's output yet: " + string(b))
		}
		return nil
	})
	if _, err := n.c.LogPaths("a1", "nope"); !errors.Is(err, allocrunner.ErrUnknownTask) {
		t.Fatalf("unknown task: %v", err)
	}
}

// TaskDead, which ends a followed log, is false while a task runs and true
// once it has exited for good (its log complete), for the named task and
// for the alloc's only task when none is named.
func TestTaskDead(t *testing.T) {
	f := newFakeServer(t)
	n := newNode(t, t.TempDir(), f.addr, true)
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, sleeper("web"))
	f.place(allocOf("a1", j), j)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	killAtEnd(t, taskPid(t, n, "a1", "web"))
	for _, task := range []string{"web", ""} {
		if dead, err := n.c.TaskDead("a1", task); dead || err != nil {
			t.Fatalf("running task %q: dead %t, %v", task, dead, err)
		}
	}
	// Every follower asks four times a second: it reads the one task's
	// state, and copies none (every task's state, events included, was
	// copied on each ask).
	if allocs := testing.AllocsPerRun(50, func() { _, _ = n.c.TaskDead("a1", "web") }); allocs != 0 {
		t.Fatalf("TaskDead of a named task makes %.0f allocations, want none", allocs)
	}

	done := &pb.Task{Name: "once", Driver: "raw_exec", KillTimeoutMs: 2000, Config: sdk.ConfigMap{
		"command": sdk.StringValue("/bin/sh"), "args": sdk.ListValue("-c", "echo done")}}
	b := mockJob(pb.JobType_JOB_TYPE_BATCH, done)
	b.Id, b.Name = "batch", "batch"
	f.place(allocOf("b1", b), b)
	waitReported(t, f, "b1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE))
	for _, task := range []string{"once", ""} {
		if dead, err := n.c.TaskDead("b1", task); !dead || err != nil {
			t.Fatalf("finished task %q: dead %t, %v", task, dead, err)
		}
	}

	if _, err := n.c.TaskDead("nope", ""); !errors.Is(err, ErrUnknownAlloc) {
		t.Fatalf("unknown alloc: %v", err)
	}
	if _, err := n.c.TaskDead("a1", "nope"); !errors.Is(err, allocrunner.ErrUnknownTask) {
		t.Fatalf("unknown task: %v", err)
	}
}

// A watch blocked on a server that goes silent moves to another server as
// soon as another call (a heartbeat) finds that server unresponsive, not
// when its max_wait runs out.
func TestWatchMovesOffASilentServer(t *testing.T) {
	f := newFakeServer(t)
	p1, p2 := newSilentProxy(t, f.addr), newSilentProxy(t, f.addr)
	db, m := driversFor(t, t.TempDir())
	c, err := New(Config{DataDir: t.TempDir(), Servers: []string{p1.addr(), p2.addr()}, Logger: testutil.Logger(t),
		TaskDrivers: ManagerDrivers(m), State: db, WatchMaxWait: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	var on string
	testutil.WaitFor(t, generous, func() error {
		c.mu.Lock()
		on = c.watching.server
		c.mu.Unlock()
		if on == "" || len(f.watchRequests()) == 0 {
			return errors.New("no watch under way")
		}
		return nil
	})
	if on == p1.addr() {
		p1.silence()
	} else {
		p2.silence()
	}
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "web", Driver: "mock"})
	began := time.Now()
	f.place(allocOf("a1", j), j)
	// Heartbeats come every TTL/3 (10s here) and an attempt at a silent
	// server times out within the TTL: well under a minute, where the
	// watch's own max_wait is ten.
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	if took := time.Since(began); took > time.Minute {
		t.Fatalf("the alloc ran %s after its placement", took)
	}
	c.mu.Lock()
	now := c.watching.server
	c.mu.Unlock()
	if now == on {
		t.Fatalf("the watch is still on the silent server %s", on)
	}
}

// Updates the servers could not take reach them: a failed batch is sent
// again; a refused one is dropped, and the next registration sends every
// alloc's status again.
func TestStatusesReachTheServersAfterFailuresAndRefusals(t *testing.T) {
	f := newFakeServer(t)
	f.mu.Lock()
	f.failUpdates, f.refuseUpdates = 1, 100
	f.mu.Unlock()
	n := newNode(t, t.TempDir(), f.addr, true)
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "web", Driver: "mock"})
	f.place(allocOf("a1", j), j)
	testutil.WaitFor(t, generous, func() error {
		if st, _, err := n.c.AllocStates("a1"); err != nil || st != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING {
			return fmt.Errorf("alloc a1: %v %v", st, err)
		}
		n.c.allocs.updater.mu.Lock()
		defer n.c.allocs.updater.mu.Unlock()
		if n.c.allocs.updater.inflight {
			return errors.New("updates in flight")
		}
		return nil
	})
	f.mu.Lock()
	if f.failUpdates != 0 || f.lastUpdateLocked("a1") != nil {
		f.mu.Unlock()
		t.Fatalf("expected the first batch to fail and the rest to be refused")
	}
	f.refuseUpdates = 0
	f.mu.Unlock()
	n.c.UpdateNode() // registers again
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
}

// TestWatchIgnoresAServerBehindTheClient: an answer whose index is below
// what the client already saw comes from a server that has not caught up
// (a lagging follower, a wait that ran out first); the allocs it lacks
// must not be destroyed. Only when every server keeps answering behind —
// the cluster's state really went back — is its answer taken.
func TestWatchIgnoresAServerBehindTheClient(t *testing.T) {
	f := newFakeServer(t)
	db, m := driversFor(t, t.TempDir())
	c, err := New(Config{DataDir: t.TempDir(), Servers: []string{f.addr}, Logger: testutil.Logger(t),
		TaskDrivers: ManagerDrivers(m), State: db, WatchMaxWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "web", Driver: "mock"})
	f.place(allocOf("a1", j), j)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))

	// The server goes back: a1 is unknown to it and its index is older.
	f.mu.Lock()
	seen := f.index
	delete(f.allocs, "a1")
	f.index = seen - 1
	watchesBefore := len(f.watches)
	f.mu.Unlock()
	// Wait until the client has been answered behind at least once.
	testutil.WaitFor(t, 10*time.Second, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.watches) < watchesBefore+2 {
			return fmt.Errorf("%d watches since the server went back", len(f.watches)-watchesBefore)
		}
		return nil
	})
	if _, err := c.runner("a1"); err != nil {
		t.Fatalf("a1 destroyed on an answer from a server behind the client: %v", err)
	}
	// It keeps answering behind: after a few rounds the client takes its
	// state, and a1 goes.
	testutil.WaitFor(t, 60*time.Second, func() error {
		if _, err := c.runner("a1"); !errors.Is(err, ErrUnknownAlloc) {
			return fmt.Errorf("a1 still runs (%v)", err)
		}
		return nil
	})
}

// A watch answer the servers held to their byte budget (more set, the rest
// as stubs) is followed at once by another for the rest, not by a blocking
// wait for the next change; and a job version the client holds is sent as
// known and not sent again, the alloc that runs it still started.
func TestWatcherAsksAgainAtOnceForAPagedAnswer(t *testing.T) {
	f := newFakeServer(t)
	f.pageAllocs = 1
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "web", Driver: "mock", KillTimeoutMs: 1000})
	for _, id := range []string{"a1", "a2", "a3"} {
		f.place(allocOf(id, j), j)
	}
	newNode(t, t.TempDir(), f.addr, true) // watches block for WatchMaxWait, 5 minutes
	for _, id := range []string{"a1", "a2", "a3"} {
		waitReported(t, f, id, status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	}
	f.mu.Lock()
	sent := f.jobsSent["web@1"]
	f.mu.Unlock()
	if sent != 1 {
		t.Fatalf("job web@1 was sent %d times for three allocs, want once (then known)", sent)
	}
	reqs := f.watchRequests()
	if !slices.Contains(reqs[len(reqs)-1].GetKnownJobs(), "web@1") || !reqs[len(reqs)-1].GetPaged() {
		t.Fatalf("last watch %v: want paged, with web@1 known", reqs[len(reqs)-1])
	}
}
