package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// lockedBuffer is a bytes.Buffer a running command writes while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAllocLogsFollowExitsWhenTheTaskEnds is the report's case against a
// real agent: `alloc logs ALLOC -f` (the flag after the ID) follows a
// running task's stdout and exits 0 once the task has finished, having
// printed its last line. Before, it never exited.
func TestAllocLogsFollowExitsWhenTheTaskEnds(t *testing.T) {
	a := startAgent(t)
	addr := "http://" + a.HTTPAddr()
	t.Setenv("BERTH_ADDR", addr)
	dir := t.TempDir()
	middle, gate := filepath.Join(dir, "middle"), filepath.Join(dir, "gate")
	job := &pb.Job{Id: "once", Name: "once", Type: pb.JobType_JOB_TYPE_BATCH, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "g", Count: 1, Tasks: []*pb.Task{{Name: "t", Driver: "raw_exec", KillTimeoutMs: 2000,
			Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/sh"), "args": sdk.ListValue("-c",
				// Waits for the test before each later line, so the
				// follow starts, and goes on, while the task runs.
				fmt.Sprintf(`echo first; while [ ! -e %q ]; do sleep 0.02; done; echo middle; while [ ! -e %q ]; do sleep 0.02; done; echo last`,
					middle, gate))}}}}}}
	if code, out, errOut := berth(t, "job", "run", writeJobFile(t, job)); code != 0 {
		t.Fatalf("job run: exit %d\n%s%s", code, out, errOut)
	}
	client, err := api.NewClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	allocs, _, err := client.Jobs().Allocations(context.Background(), "once", nil)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("allocs of job once: %v, %v", allocs, err)
	}

	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"berth", "alloc", "logs", allocs[0].GetId()[:8], "-f"}, &out, &errOut) }()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if !strings.Contains(out.String(), "first\n") {
			return fmt.Errorf("followed %q so far (stderr %q)", out.String(), errOut.String())
		}
		return nil
	})
	// The task is alive (the client reports it running) and the follow
	// has been going since "first": it must still be there for a line
	// written now. A follow that ended early misses it and ends first.
	testutil.WaitFor(t, 20*time.Second, func() error {
		a, _, err := client.Allocations().Info(context.Background(), allocs[0].GetId(), nil)
		if err != nil {
			return err
		}
		if st := a.GetTaskStates()["t"].GetState(); st != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
			return fmt.Errorf("task t is %s", st)
		}
		return nil
	})
	if err := os.WriteFile(middle, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		select {
		case code := <-done:
			t.Fatalf("alloc logs -f ended (exit %d) while the task runs: %q %q", code, out.String(), errOut.String())
		default:
		}
		if !strings.Contains(out.String(), "middle\n") {
			return fmt.Errorf("followed %q so far", out.String())
		}
		return nil
	})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 || out.String() != "first\nmiddle\nlast\n" {
			t.Fatalf("alloc logs -f: exit %d, stdout %q, stderr %q; want 0 and both lines", code, out.String(), errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("alloc logs -f did not exit after the task ended; printed %q", out.String())
	}
}
