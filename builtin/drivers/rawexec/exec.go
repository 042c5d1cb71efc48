package rawexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"berth.dev/berth/builtin/drivers/internal/taskexec"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// maxExecOutput caps each output stream of ExecTask.
const maxExecOutput = 1 << 20

// ExecTask implements sdk.ExecDriver: it runs command on the host with the
// task's environment, working directory and user, in a process group that
// is killed as a whole at the timeout.
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
	// buildSpec resolves the task's directory and user as StartTask did.
	spec, err := buildSpec(t.Config())
	if err != nil {
		return nil, fmt.Errorf("exec in task %q: %w", taskID, err)
	}
	env := t.Config().GetEnv()
	path, err := lookPath(command[0], spec.Dir, env["PATH"])
	if err != nil {
		return nil, fmt.Errorf("exec in task %q: %w", taskID, err)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var stdout, stderr capped
	cmd := exec.CommandContext(ctx, path, command[1:]...)
	cmd.Args[0] = command[0]
	cmd.Dir = spec.Dir
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c := spec.Credential; c != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: c.Groups}
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second

	runErr := cmd.Run()
	if cmd.Process != nil {
		// Whatever the command left running in its group ends with it.
		// The group ID cannot name another group yet: Linux keeps a PID
		// in use while it names a process group.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if cmd.ProcessState == nil {
		return nil, fmt.Errorf("exec in task %q: %w", taskID, runErr)
	}
	// The command ran: its wait status is the result, whatever Run says
	// (exec.ErrWaitDelay when a background child held the output open,
	// ctx.Err() when it exited cleanly after the timeout).
	res := &driverpb.ExecResult{Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes(), Exit: &driverpb.ExitResult{FinishedAt: time.Now().UnixNano()}}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		res.Exit.ExitCode = int32(cmd.ProcessState.ExitCode())
	case ws.Signaled():
		res.Exit.Signal, res.Exit.ExitCode = int32(ws.Signal()), 128+int32(ws.Signal())
	default:
		res.Exit.ExitCode = int32(ws.ExitStatus())
	}
	switch err := ctx.Err(); {
	case errors.Is(err, context.DeadlineExceeded) && timeout > 0:
		res.Exit.Err = "exec timed out after " + timeout.String()
	case err != nil:
		res.Exit.Err = "exec ended early: " + err.Error()
	}
	return res, nil
}

// capped keeps the first maxExecOutput bytes written to it.
type capped struct{ buf bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxExecOutput - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
