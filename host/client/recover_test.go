package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// clientDirEnv and clientServerEnv make this test binary a client process
// on that data dir and server: it runs until its alloc a1's task web is
// running, prints "ready <pid>" and waits to be killed.
const (
	clientDirEnv    = "BERTH_CLIENT_TEST_DIR"
	clientServerEnv = "BERTH_CLIENT_TEST_SERVER"
)

func runClientProcessIfRequested() {
	dir := os.Getenv(clientDirEnv)
	if dir == "" {
		return
	}
	if err := runClientProcess(dir, os.Getenv(clientServerEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "client process:", err)
		os.Exit(1)
	}
	select {}
}

func runClientProcess(dir, server string) error {
	logger := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Debug})
	n, err := startNode(dir, server, logger, false)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(generous)
	for time.Now().Before(deadline) {
		if _, states, err := n.c.AllocStates("a1"); err == nil &&
			states["web"].GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
			recs, _ := n.db.TaskStates("a1")
			for _, r := range recs {
				// Ready once the running state is recorded, not only the
				// attempt (written before StartTask): a kill in between
				// recovers the task without its Started event.
				if r.GetTask() != "web" || r.GetTaskId() == "" ||
					r.GetState().GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
					continue
				}
				d, _ := n.m.Driver(r.GetDriver())
				st, err := d.InspectTask(context.Background(), r.GetTaskId())
				if err != nil {
					return err
				}
				fmt.Printf("ready %s\n", st.GetAttributes()["pid"])
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("alloc a1 never ran")
}

// lineLogger sends a child's stderr lines to t.Log.
type lineLogger struct{ t *testing.T }

func (l *lineLogger) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // the test may have ended
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func startedEvents(st *pb.TaskState) int {
	n := 0
	for _, ev := range st.GetEvents() {
		if ev.GetType() == "Started" {
			n++
		}
	}
	return n
}

// checkRecovered checks that the restarted node supervises the same
// process, never started another, and reports the alloc running.
func checkRecovered(t *testing.T, f *fakeServer, n *node, pid int) {
	t.Helper()
	testutil.WaitFor(t, generous, func() error {
		_, states, err := n.c.AllocStates("a1")
		if err != nil {
			return err
		}
		if states["web"].GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
			return fmt.Errorf("task web: %v", states["web"])
		}
		// The restored state reads running at once; recovery is done
		// when the state DB names the recovered attempt.
		recs, err := n.db.TaskStates("a1")
		if err != nil || len(recs) != 1 || recs[0].GetTaskId() == "" {
			return fmt.Errorf("task states %v, %v: the attempt is not named yet", recs, err)
		}
		return nil
	})
	if got := taskPid(t, n, "a1", "web"); got != pid {
		t.Fatalf("task pid %d after the client restarted, was %d", got, pid)
	}
	if !alive(pid) {
		t.Fatalf("task pid %d died", pid)
	}
	_, states, _ := n.c.AllocStates("a1")
	if st := states["web"]; startedEvents(st) != 1 || st.GetRestarts() != 0 {
		t.Fatalf("task web was started again: %v", st)
	}
	// The alloc comes back to the servers as running, and a stop still works.
	before := f.firstStatusAt("a1", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE)
	if !before.IsZero() {
		t.Fatal("alloc reported complete")
	}
	f.stop("a1")
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE))
	testutil.WaitFor(t, generous, func() error {
		if alive(pid) {
			return fmt.Errorf("pid %d still alive after the stop", pid)
		}
		return nil
	})
}

// A client stopped gracefully and started again on its data dir recovers
// its running task: the same process, not restarted.
func TestRecoverAfterGracefulStop(t *testing.T) {
	f := newFakeServer(t)
	dir := t.TempDir()
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, sleeper("web"))
	f.place(allocOf("a1", j), j)
	n := newNode(t, dir, f.addr, false)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	pid := taskPid(t, n, "a1", "web")
	killAtEnd(t, pid)
	n.stop()
	if !alive(pid) {
		t.Fatal("a graceful client stop killed the task")
	}
	n = newNode(t, dir, f.addr, true)
	checkRecovered(t, f, n, pid)
}

// The same after kill -9 of the client process.
func TestRecoverAfterKill9(t *testing.T) {
	f := newFakeServer(t)
	dir := t.TempDir()
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, sleeper("web"))
	f.place(allocOf("a1", j), j)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), clientDirEnv+"="+dir, clientServerEnv+"="+f.addr)
	cmd.Stderr = &lineLogger{t: t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("client process: %v (its log is above)", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "ready ")))
	if err != nil || !alive(pid) {
		t.Fatalf("client process said %q", line)
	}
	killAtEnd(t, pid)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if !alive(pid) {
		t.Fatal("the task died with its client")
	}
	n := newNode(t, dir, f.addr, true)
	checkRecovered(t, f, n, pid)
}

// An alloc the servers stopped while the client was down is stopped when
// it comes back; one that had completed is not run again.
func TestRecoveryReconcilesWithTheServers(t *testing.T) {
	f := newFakeServer(t)
	dir := t.TempDir()
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, sleeper("web"))
	f.place(allocOf("a1", j), j)
	batch := mockJob(pb.JobType_JOB_TYPE_BATCH, &pb.Task{Name: "once", Driver: "mock",
		Config: sdk.ConfigMap{"run_for": sdk.DurationValue(10 * time.Millisecond)}})
	batch.Id = "batch"
	f.place(allocOf("b1", batch), batch)
	n := newNode(t, dir, f.addr, false)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	waitReported(t, f, "b1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE))
	pid := taskPid(t, n, "a1", "web")
	killAtEnd(t, pid)
	n.stop()

	f.stop("a1")
	n = newNode(t, dir, f.addr, true)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE))
	testutil.WaitFor(t, generous, func() error {
		if alive(pid) {
			return fmt.Errorf("pid %d of a stopped alloc still alive", pid)
		}
		return nil
	})
	_, states, err := n.c.AllocStates("b1")
	if err != nil {
		t.Fatal(err)
	}
	if st := states["once"]; startedEvents(st) != 1 || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		t.Fatalf("completed task after the restart: %v", st)
	}
}

// A client killed between the driver persisting a task's handle and the
// task's state naming it finds the handle and adopts it (same process);
// a handle of an alloc it does not know is destroyed, its task killed.
func TestRecoveryAdoptsUnnamedHandlesAndReapsOrphans(t *testing.T) {
	f := newFakeServer(t)
	dir := t.TempDir()
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, sleeper("web"))
	f.place(allocOf("a1", j), j)
	orphanJob := mockJob(pb.JobType_JOB_TYPE_SERVICE, sleeper("web"))
	orphanJob.Id = "orphan"
	f.place(allocOf("o1", orphanJob), orphanJob)
	n := newNode(t, dir, f.addr, false)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	waitReported(t, f, "o1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	pid := taskPid(t, n, "a1", "web")
	orphanPid := taskPid(t, n, "o1", "web")
	killAtEnd(t, pid)
	killAtEnd(t, orphanPid)
	n.c.Shutdown()
	// As if the client had died at the wrong moments: a1's task state
	// does not name its attempt, and o1 was never recorded at all.
	states, err := n.db.TaskStates("a1")
	if err != nil || len(states) != 1 {
		t.Fatalf("task states %v, %v", states, err)
	}
	states[0].TaskId = ""
	if err := n.db.PutTaskState(states[0]); err != nil {
		t.Fatal(err)
	}
	if err := n.db.DeleteAlloc("o1"); err != nil {
		t.Fatal(err)
	}
	f.remove("o1")
	n.c = nil
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	n.m.Shutdown(ctx)
	n.db.Close()

	n = newNode(t, dir, f.addr, true)
	testutil.WaitFor(t, generous, func() error {
		if alive(orphanPid) {
			return fmt.Errorf("orphaned task pid %d still alive", orphanPid)
		}
		return nil
	})
	checkRecovered(t, f, n, pid)
}

// An alloc whose record cannot be recovered after a restart (here its
// group is not in its job) has its tasks destroyed, not left running
// unsupervised; stopped by the servers meanwhile, it ran here (client
// status running), so it is not reported "complete, stopped before the
// client ran it".
func TestAnAllocThatCannotBeRecoveredHasItsTasksDestroyedAndIsReportedFailed(t *testing.T) {
	f := newFakeServer(t)
	dir := t.TempDir()
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, sleeper("web"))
	f.place(allocOf("a1", j), j)
	n := newNode(t, dir, f.addr, false)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	pid := taskPid(t, n, "a1", "web")
	killAtEnd(t, pid)
	n.c.Shutdown()
	recs, err := n.db.Allocs()
	if err != nil || len(recs) != 1 {
		t.Fatalf("alloc records %v, %v", recs, err)
	}
	recs[0].Alloc.TaskGroup = "not-in-the-job"
	if err := n.db.PutAlloc(recs[0]); err != nil {
		t.Fatal(err)
	}
	n.c = nil
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	n.m.Shutdown(ctx)
	n.db.Close()
	f.mu.Lock()
	stopped := proto.CloneOf(f.allocs["a1"])
	f.mu.Unlock()
	stopped.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP
	stopped.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING
	f.place(stopped, j)

	n = newNode(t, dir, f.addr, true)
	testutil.WaitFor(t, generous, func() error {
		if alive(pid) {
			return fmt.Errorf("task pid %d of the unrecoverable alloc still alive", pid)
		}
		return nil
	})
	// An alloc placed after: its running report follows anything the
	// answer that sent the stopped a1 queued.
	f.place(allocOf("a2", j), j)
	waitReported(t, f, "a2", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	if _, err := n.c.runner("a1"); !errors.Is(err, ErrUnknownAlloc) {
		t.Errorf("unrecoverable alloc a1 has a runner (%v)", err)
	}
	// Stopped by the servers, it is reported failed (it ended here, its
	// tasks destroyed), not "stopped before the client ran it" and not
	// left running on the servers for good.
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED))
	if u := f.lastUpdate("a1"); !strings.Contains(u.GetClientDescription(), "could not be restored") {
		t.Errorf("alloc a1, which ran here, reported %v", u)
	}
}
