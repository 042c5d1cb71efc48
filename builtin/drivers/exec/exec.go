package execdriver

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/builtin/drivers/internal/taskexec"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
)

// ExecTask implements sdk.ExecDriver: the task's init runs command inside
// the task — its namespaces and root, its user, environment, working
// directory and capability limits — in a process group killed as a whole
// at the timeout.
func (d *Driver) ExecTask(ctx context.Context, taskID string, command []string, timeout time.Duration) (*driverpb.ExecResult, error) {
	t, proc, err := d.Get(taskID)
	if err != nil {
		return nil, err
	}
	if taskexec.Exited(proc) {
		return nil, fmt.Errorf("exec in task %q: %w", taskID, sdk.ErrTaskNotRunning)
	}
	if len(command) == 0 {
		return nil, fmt.Errorf("exec in task %q: no command given", taskID)
	}
	out, err := executor.ExecIn(ctx, d.StateDir(t.Config()), command, timeout)
	if err != nil {
		if taskexec.Exited(proc) {
			return nil, fmt.Errorf("exec in task %q: %w", taskID, sdk.ErrTaskNotRunning)
		}
		return nil, fmt.Errorf("exec in task %q: %w", taskID, err)
	}
	return &driverpb.ExecResult{Stdout: out.Stdout, Stderr: out.Stderr, Exit: out.Exit.Result()}, nil
}
