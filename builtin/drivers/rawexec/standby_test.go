package rawexec_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/builtin/drivers/rawexec"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
)

// raw_exec starts a task on an executor started ahead of it (issue 26: a
// volume move's consumer waited for the plugin binary's re-execution at
// every start): after the first start, the next task's executor is
// already there, a start takes it and the driver starts another; Shutdown
// ends the one left.
// newDriver is a raw_exec driver whose Shutdown runs at the end of the
// test, so the executor it started ahead does not outlive the test.
func newDriver(t *testing.T) *rawexec.Driver {
	d := rawexec.New(drivertest.Logger(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	return d
}

func TestStartTakesTheExecutorStartedAhead(t *testing.T) {
	d := newDriver(t)
	if err := d.SetConfig(ctxT(t), &driverpb.PluginConfig{Values: enabled}); err != nil {
		t.Fatal(err)
	}
	ahead := func() int {
		t.Helper()
		pid, err := d.NextStandby(ctxT(t))
		if err != nil {
			t.Fatalf("no executor started ahead of the next task: %v", err)
		}
		return pid
	}
	executor := func(id string) int {
		t.Helper()
		_, proc, err := d.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		return proc.State().Executor.Pid
	}
	start(t, d, taskCfg(t, "t1", sh("exec sleep 1000")))
	for _, id := range []string{"t2", "t3"} {
		want := ahead()
		start(t, d, taskCfg(t, id, sh("exec sleep 1000")))
		if got := executor(id); got != want {
			t.Fatalf("task %s runs under executor %d, want %d, the one started ahead", id, got, want)
		}
	}
	left := ahead()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.Shutdown(ctx)
	// Close returns once the standby is reaped, or after it was killed
	// and waited for again: woken first, it ends at the driver's
	// scheduling, long before.
	if err := syscall.Kill(left, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the executor started ahead (%d) is still there after Shutdown: %v", left, err)
	}
}
