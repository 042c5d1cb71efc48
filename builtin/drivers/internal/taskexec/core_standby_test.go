package taskexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
	"berth.dev/berth/sdk/logrotate"
)

// trueFlavor runs /bin/true, not isolated.
type trueFlavor struct{ c *Core }

func (f *trueFlavor) Prepare(cfg *driverpb.TaskConfig) (*executor.Spec, error) {
	logs := filepath.Join(cfg.GetTaskDir(), "logs")
	return &executor.Spec{Path: "/bin/true", Args: []string{"true"}, Dir: cfg.GetTaskDir(),
		Stdout: logrotate.Config{Dir: logs, Name: "out"}, Stderr: logrotate.Config{Dir: logs, Name: "err"},
		StateDir: f.c.StateDir(cfg)}, nil
}
func (f *trueFlavor) Release(*driverpb.TaskConfig) error                { return nil }
func (f *trueFlavor) Exited(*driverpb.TaskConfig, *driverpb.ExitResult) {}

// With standbys on, a start after the first runs its task on the executor
// started ahead of it (its process is older than the start), and the Core
// starts the next one; CloseStandby ends the one left. Without, every
// start starts its own executor.
func TestStartsTakeTheExecutorStartedAhead(t *testing.T) {
	if _, err := os.Stat("/bin/true"); err != nil {
		t.Skip("no /bin/true to run:", err)
	}
	f := &trueFlavor{}
	c := New(testName, ".rawexec", f, nil)
	f.c = c
	c.EnableStandby()
	ctx := context.Background()
	start := func(id string) int {
		t.Helper()
		cfg := &driverpb.TaskConfig{Id: id, Name: id, TaskDir: t.TempDir()}
		if _, err := c.StartTask(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		_, proc, err := c.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitTask(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := c.DestroyTask(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		return proc.State().Executor.Pid
	}
	ahead := func() int {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		pid, err := c.NextStandby(ctx)
		if err != nil {
			t.Fatalf("no executor started ahead: %v", err)
		}
		return pid
	}
	start("t1")
	for _, id := range []string{"t2", "t3"} {
		want := ahead()
		if got := start(id); got != want {
			t.Fatalf("task %s ran on executor %d, want %d, started ahead", id, got, want)
		}
	}
	left := ahead()
	c.CloseStandby()
	if err := syscall.Kill(left, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the executor started ahead (%d) is still there after CloseStandby: %v", left, err)
	}
	if got := start("t4"); got == left {
		t.Fatal("a start after CloseStandby used the closed standby")
	}
	c.standby.mu.Lock()
	defer c.standby.mu.Unlock()
	if c.standby.next != nil || c.standby.filling {
		t.Fatal("a standby started after CloseStandby")
	}
}

// A standby whose start was under way when CloseStandby came is ended
// before CloseStandby returns, not left to a goroutine the exiting plugin
// does not wait for.
func TestCloseStandbyEndsTheOneBeingStarted(t *testing.T) {
	self, err := executor.Self()
	if err != nil {
		t.Fatal(err)
	}
	c := New(testName, ".rawexec", &trueFlavor{}, nil)
	c.EnableStandby()
	started, release := make(chan int, 1), make(chan struct{})
	c.standby.start = func(cmd executor.Command, isolated bool) (*executor.Standby, error) {
		sb, err := executor.NewStandby(cmd, isolated)
		if err == nil {
			started <- sb.Pid()
		} else {
			close(started)
		}
		<-release
		return sb, err
	}
	go c.fillStandby(self, false)
	pid, ok := <-started
	if !ok {
		t.Fatal("the standby did not start")
	}
	closed := make(chan struct{})
	go func() {
		c.CloseStandby()
		close(closed)
	}()
	// Released only once CloseStandby has marked the Core closed, so the
	// start ends after it.
	testutil.WaitFor(t, 30*time.Second, func() error {
		c.standby.mu.Lock()
		defer c.standby.mu.Unlock()
		if !c.standby.closed {
			return errors.New("CloseStandby has not begun")
		}
		return nil
	})
	close(release)
	<-closed
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the standby being started (%d) is still there after CloseStandby: %v", pid, err)
	}
}
