package taskexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
)

// handleVersion is the format version of driverState.
const handleVersion = 1

// driverState is the driver's part of a task handle.
type driverState struct {
	Executor executor.State `json:"executor"`
}

func (c *Core) encodeHandle(t *Task) (*driverpb.TaskHandle, error) {
	state, err := json.Marshal(driverState{Executor: t.proc.Load().State()})
	if err != nil {
		return nil, fmt.Errorf("encode handle: %w", err)
	}
	return &driverpb.TaskHandle{
		Version:     handleVersion,
		Driver:      c.name,
		Config:      t.cfg,
		State:       driverpb.TaskState_TASK_STATE_RUNNING,
		DriverState: state,
		StartedAt:   t.startedAt.UnixNano(),
	}, nil
}

// decodeHandle checks that h is a handle of this driver and returns its state.
func (c *Core) decodeHandle(h *driverpb.TaskHandle) (*driverState, error) {
	if h.GetDriver() != c.name || h.GetVersion() != handleVersion {
		return nil, fmt.Errorf("%w: issued by driver %q version %d, want %q version %d",
			sdk.ErrInvalidHandle, h.GetDriver(), h.GetVersion(), c.name, handleVersion)
	}
	if err := sdk.ValidateTaskConfig(c.name, h.GetConfig()); err != nil || h.GetConfig().GetTaskDir() == "" {
		return nil, fmt.Errorf("%w: task config: %v", sdk.ErrInvalidHandle, err)
	}
	var st driverState
	if err := json.Unmarshal(h.GetDriverState(), &st); err != nil {
		return nil, fmt.Errorf("%w: driver state: %v", sdk.ErrInvalidHandle, err)
	}
	// The state directory is derived from the config, never trusted: a
	// handle must not point the driver at another task's files.
	if want := c.StateDir(h.GetConfig()); st.Executor.StateDir != want {
		return nil, fmt.Errorf("%w: state dir %q, want %q", sdk.ErrInvalidHandle, st.Executor.StateDir, want)
	}
	if st.Executor.Executor.Pid <= 0 || st.Executor.Task.Pid <= 0 {
		return nil, fmt.Errorf("%w: no executor or task pid", sdk.ErrInvalidHandle)
	}
	return &st, nil
}

// RecoverTask implements sdk.Driver. It works whether or not the driver is
// enabled: tasks started before it was disabled can still be watched,
// stopped and destroyed.
func (c *Core) RecoverTask(_ context.Context, h *driverpb.TaskHandle) error {
	st, err := c.decodeHandle(h)
	if err != nil {
		return err
	}
	id := h.GetConfig().GetId()
	if _, err := c.tasks.Get(id); err == nil {
		return nil
	}
	proc, err := executor.Recover(st.Executor, c.logger.With("task_id", id))
	if errors.Is(err, executor.ErrLost) {
		return fmt.Errorf("recover task %q: %w: %v", id, sdk.ErrTaskNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("recover task %q: %w", id, err)
	}
	t := newTask(h.GetConfig(), time.Unix(0, h.GetStartedAt()))
	t.proc.Store(proc)
	if _, added := c.tasks.AddIfAbsent(id, t); !added {
		proc.Close()
		return nil
	}
	go c.watch(t)
	c.logger.Info("task recovered", "task_id", id, "pid", proc.Pid())
	return nil
}
