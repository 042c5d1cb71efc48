package taskexec

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
	"berth.dev/berth/sdk/logrotate"
)

func TestMain(m *testing.M) {
	if executor.Requested() {
		os.Exit(executor.Main())
	}
	os.Exit(m.Run())
}

// restartingFlavor runs /bin/true and, in Release, tries to start its
// task's ID again, as a client restarting the task at that moment would.
type restartingFlavor struct {
	c *Core
	// restartErr is the start's error, per Release.
	restartErr []error
}

func (f *restartingFlavor) Prepare(cfg *driverpb.TaskConfig) (*executor.Spec, error) {
	logs := filepath.Join(cfg.GetTaskDir(), "logs")
	return &executor.Spec{
		Path: "/bin/true", Args: []string{"true"}, Dir: cfg.GetTaskDir(),
		Stdout:   logrotate.Config{Dir: logs, Name: "out"},
		Stderr:   logrotate.Config{Dir: logs, Name: "err"},
		StateDir: f.c.StateDir(cfg),
	}, nil
}

func (f *restartingFlavor) Release(cfg *driverpb.TaskConfig) error {
	if len(f.restartErr) > 0 {
		return nil // the restarted task's own release
	}
	h, err := f.c.StartTask(context.Background(), cfg)
	f.restartErr = append(f.restartErr, err)
	if err == nil {
		// The restart got in: end it so the test leaves nothing behind.
		f.c.DestroyTask(context.Background(), h.GetConfig().GetId(), true)
	}
	return nil
}

func (f *restartingFlavor) Exited(*driverpb.TaskConfig, *driverpb.ExitResult) {}

// TestDestroyReleasesBeforeFreeingTheID: DestroyTask runs the flavor's
// Release while the task's ID is still reserved, so a start of the same
// ID cannot slip in between (and have what Release began — exec's
// background cgroup removal — take the new task's setup).
func TestDestroyReleasesBeforeFreeingTheID(t *testing.T) {
	if _, err := os.Stat("/bin/true"); err != nil {
		t.Skip("no /bin/true to run:", err)
	}
	f := &restartingFlavor{}
	c := New(testName, ".rawexec", f, nil)
	f.c = c
	cfg := &driverpb.TaskConfig{Id: "t1", Name: "t1", TaskDir: t.TempDir()}
	ctx := context.Background()
	if _, err := c.StartTask(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTask(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := c.DestroyTask(ctx, "t1", false); err != nil {
		t.Fatal(err)
	}
	if len(f.restartErr) == 0 {
		t.Fatal("Release was not called")
	}
	if f.restartErr[0] == nil {
		t.Error("a start of the task's ID succeeded while DestroyTask was releasing it")
	}
	if _, err := c.tasks.Get("t1"); err == nil {
		t.Error("the task's ID is still reserved after DestroyTask")
	}
}
