package taskdrivers

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// Driver runs tasks through one driver of a Manager. Its calls go to the
// plugin process running at the time; when that process dies under a call
// that is safe to repeat (WaitTask, StopTask, DestroyTask, InspectTask,
// RecoverTask), the call waits until the manager has restarted the plugin
// and recovered the driver's tasks, and runs again, so a caller sees the
// task, not the plugin crash. StartTask, SignalTask and ExecTask are not
// repeated: they return the *sdk.RPCError wrapping sdk.ErrPluginShutdown.
//
// StartTask persists the task's handle in the manager's Store and
// DestroyTask deletes it; the manager recovers every persisted task in
// each plugin it (re)starts.
type Driver struct {
	in *instance
}

var (
	_ sdk.TaskLifecycle = (*Driver)(nil)
	_ sdk.TaskObserver  = (*Driver)(nil)
	_ sdk.ExecDriver    = (*Driver)(nil)
	_ sdk.StatsDriver   = (*Driver)(nil)
)

// Name is the driver's name.
func (d *Driver) Name() string { return d.in.p.Name }

// Info returns the driver's current DriverInfo (health, version, ...).
func (d *Driver) Info() *pb.DriverInfo { return d.in.driverInfo() }

// Capabilities returns the running plugin's capabilities, or
// ErrDriverUnavailable when no plugin runs (ErrDriverFailed when none will).
func (d *Driver) Capabilities(ctx context.Context) (*driverpb.DriverCapabilities, error) {
	r, err := d.in.acquire(ctx, false)
	if err != nil {
		return nil, err
	}
	return r.Val.caps, nil
}

// HonoursMounts reports whether the running plugin gives a task the mounts
// of its TaskConfig (sdk.MountsSupported: the mount_volumes capability at
// driver API version 2 or later) — the same test StartTask applies, so a
// caller that adds mounts when it says true is not refused. It fails like
// StartTask when no plugin runs.
func (d *Driver) HonoursMounts(ctx context.Context) (bool, error) {
	r, err := d.in.acquire(ctx, false)
	if err != nil {
		return false, err
	}
	return sdk.MountsSupported(r.Val.client.APIVersion(), r.Val.caps), nil
}

// TaskConfigSpec returns the spec to validate a job's config block for this
// driver with, from the running plugin's task schema.
func (d *Driver) TaskConfigSpec(ctx context.Context) (sdk.ConfigSpec, error) {
	r, err := d.in.acquire(ctx, false)
	if err != nil {
		return sdk.ConfigSpec{}, err
	}
	return sdk.ConfigSpec{Plugin: d.in.p.Name, Scope: sdk.ScopeTaskConfig, Schema: r.Val.schemas.GetTask()}, nil
}

// StartTask starts a task and persists its handle before returning it. It
// fails at once with ErrDriverUnavailable when the plugin is not running
// (ErrDriverFailed when its config keeps it from ever running),
// and with sdk.ErrTaskExists when a task of any driver on this node has
// the ID. A task with mounts is refused with ErrMountsNotSupported unless
// the running plugin honours mounts (sdk.MountsSupported). If the handle cannot be persisted the task is destroyed again:
// a task berth could not recover after a restart is not started.
func (d *Driver) StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	if d.in.m.isStopping() {
		return nil, fmt.Errorf("driver manager: %w", ErrShutdown)
	}
	store := d.in.m.cfg.Store
	id := cfg.GetId()
	unreserve, err := d.in.m.reserve(id)
	if err != nil {
		return nil, fmt.Errorf("start task %q: %w", id, err)
	}
	defer unreserve()
	r, err := d.in.acquire(ctx, false)
	if err != nil {
		return nil, err
	}
	if err := d.checkMounts(r, cfg); err != nil {
		return nil, err
	}
	h, err := r.Val.client.StartTask(ctx, cfg)
	if err != nil {
		switch {
		case errors.Is(err, sdk.ErrPluginShutdown):
			// The plugin's tasks outlive it, but one started under this
			// call has no handle for the next plugin to recover, and no
			// start reuses its ID: the next plugin destroys it.
			d.in.logger.Warn("driver plugin went away during StartTask; the next plugin will destroy the task it may have started",
				"task_id", id, "error", err)
			d.destroyOnNext(r, id)
		case ctx.Err() != nil:
			d.destroyUnrecorded(ctx, r, id, "StartTask abandoned by its caller")
		}
		return nil, err
	}
	rec := &pb.TaskHandleRecord{Driver: d.in.p.Name, Handle: h, UpdatedAt: time.Now().UnixNano()}
	if err := store.PutTaskHandle(rec); err != nil {
		d.destroyUnrecorded(ctx, r, id, "its handle could not be persisted: "+err.Error())
		return nil, fmt.Errorf("start task %q: persisting its handle: %w", id, err)
	}
	return h, nil
}

// checkMounts refuses a task with mounts when r's plugin does not honour
// them. The plugin's own sdk would refuse too, but a plugin built before
// mounts existed would not: it would start the task without them.
func (d *Driver) checkMounts(r *running, cfg *driverpb.TaskConfig) error {
	mounts := cfg.GetMounts()
	v := r.Val.client.APIVersion()
	if len(mounts) == 0 || sdk.MountsSupported(v, r.Val.caps) {
		return nil
	}
	why := "does not advertise the mount_volumes capability"
	if v < sdk.APIVersionMounts {
		why = fmt.Sprintf("speaks driver API version %d, and mounts need version %d", v, sdk.APIVersionMounts)
	}
	return fmt.Errorf("start task %q on driver %q: %w: the task has %d mount(s), the first at task path %q, and the driver %s",
		cfg.GetId(), d.in.p.Name, ErrMountsNotSupported, len(mounts), mounts[0].GetTaskPath(), why)
}

// destroyUnrecorded destroys the task of a StartTask that failed after the
// plugin may have started it: with no handle persisted nothing would ever
// stop it. The caller's ctx may be over, so the clean-up gets its own
// deadline, CleanupTimeout: a plugin that does not answer cannot hang the
// failed start.
func (d *Driver) destroyUnrecorded(ctx context.Context, r *running, id, why string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.in.m.cfg.CleanupTimeout)
	defer cancel()
	if err := r.Val.client.DestroyTask(dctx, id, true); err != nil && !errors.Is(err, sdk.ErrTaskNotFound) {
		d.in.logger.Error("the task of a failed start could not be destroyed; it may run unsupervised",
			"task_id", id, "failure", why, "error", err, "cleanup_timeout", d.in.m.cfg.CleanupTimeout)
	}
}

// WaitTask waits for the task to exit and returns how it did, across
// plugin restarts.
func (d *Driver) WaitTask(ctx context.Context, taskID string) (*driverpb.ExitResult, error) {
	var res *driverpb.ExitResult
	err := d.call(ctx, taskID, func(c *sdk.DriverClient) (err error) {
		res, err = c.WaitTask(ctx, taskID)
		return err
	})
	return res, err
}

// StopTask stops the task (signal, then kill after timeout), across plugin
// restarts.
func (d *Driver) StopTask(ctx context.Context, taskID string, timeout time.Duration, signal string) error {
	return d.call(ctx, taskID, func(c *sdk.DriverClient) error {
		return c.StopTask(ctx, taskID, timeout, signal)
	})
}

// DestroyTask makes the driver forget the task (killing it if force) and
// deletes its persisted handle.
func (d *Driver) DestroyTask(ctx context.Context, taskID string, force bool) error {
	err := d.call(ctx, taskID, func(c *sdk.DriverClient) error {
		return c.DestroyTask(ctx, taskID, force)
	})
	if err != nil {
		return err
	}
	if err := d.in.m.cfg.Store.DeleteTaskHandle(taskID); err != nil {
		return fmt.Errorf("destroy task %q: deleting its handle: %w", taskID, err)
	}
	return nil
}

// InspectTask returns the task's state.
func (d *Driver) InspectTask(ctx context.Context, taskID string) (*driverpb.TaskStatus, error) {
	var st *driverpb.TaskStatus
	err := d.call(ctx, taskID, func(c *sdk.DriverClient) (err error) {
		st, err = c.InspectTask(ctx, taskID)
		return err
	})
	return st, err
}

// RecoverTask re-attaches the driver to a task from its handle and
// persists the handle, so that later plugin restarts recover it too. A
// handle the store already holds as it is (a client restart recovering
// what it read) is not written again: a write that cannot be made then (a
// full disk) must not turn a task that is recorded and running into a
// failed recovery, whose clean-up kills it. A handle issued by another
// driver is sdk.ErrInvalidHandle.
func (d *Driver) RecoverTask(ctx context.Context, handle *driverpb.TaskHandle) error {
	id := handle.GetConfig().GetId()
	if handle.GetDriver() != d.in.p.Name {
		return fmt.Errorf("recover task %q: %w: issued by driver %q, not %q", id, sdk.ErrInvalidHandle, handle.GetDriver(), d.in.p.Name)
	}
	err := d.call(ctx, "", func(c *sdk.DriverClient) error { return c.RecoverTask(ctx, handle) })
	if err != nil {
		return err
	}
	if stored, ok, err := d.in.m.cfg.Store.TaskHandle(id); err == nil && ok &&
		stored.GetDriver() == d.in.p.Name && proto.Equal(stored.GetHandle(), handle) {
		return nil
	}
	rec := &pb.TaskHandleRecord{Driver: d.in.p.Name, Handle: handle, UpdatedAt: time.Now().UnixNano()}
	if err := d.in.m.cfg.Store.PutTaskHandle(rec); err != nil {
		return fmt.Errorf("recover task %q: persisting its handle: %w", id, err)
	}
	return nil
}

// SignalTask sends a signal to the task. It is not repeated after a plugin
// crash: the signal may have been delivered.
func (d *Driver) SignalTask(ctx context.Context, taskID, signal string) error {
	return d.once(ctx, func(c *sdk.DriverClient) error { return c.SignalTask(ctx, taskID, signal) })
}

// ExecTask runs a command in the task's context. It is not repeated after
// a plugin crash.
func (d *Driver) ExecTask(ctx context.Context, taskID string, command []string, timeout time.Duration) (*driverpb.ExecResult, error) {
	var res *driverpb.ExecResult
	err := d.once(ctx, func(c *sdk.DriverClient) (err error) {
		res, err = c.ExecTask(ctx, taskID, command, timeout)
		return err
	})
	return res, err
}

// TaskStats yields the task's resource usage from the running plugin; the
// stream ends, with the error, if the plugin dies.
func (d *Driver) TaskStats(ctx context.Context, taskID string, interval time.Duration) iter.Seq2[*driverpb.TaskResourceUsage, error] {
	return func(yield func(*driverpb.TaskResourceUsage, error) bool) {
		r, err := d.in.acquire(ctx, true)
		if err != nil {
			yield(nil, err)
			return
		}
		for u, err := range r.Val.client.TaskStats(ctx, taskID, interval) {
			if errors.Is(err, sdk.ErrPluginShutdown) {
				d.in.gone(r)
			}
			if !yield(u, err) || err != nil {
				return
			}
		}
	}
}

// TaskEvents yields the events of all the driver's tasks until ctx ends,
// subscribing again to each restarted plugin (events while no plugin runs
// are lost, as delivery is best effort anyway).
func (d *Driver) TaskEvents(ctx context.Context) iter.Seq2[*driverpb.TaskEvent, error] {
	return func(yield func(*driverpb.TaskEvent, error) bool) {
		for {
			r, err := d.in.acquire(ctx, true)
			if err != nil {
				yield(nil, err)
				return
			}
			var streamErr error
			for ev, err := range r.Val.client.TaskEvents(ctx) {
				if err != nil {
					streamErr = err
					break
				}
				if !yield(ev, nil) {
					return
				}
			}
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(streamErr, sdk.ErrPluginShutdown):
				d.in.gone(r)
			case streamErr != nil:
				yield(nil, streamErr)
				return
			default:
				return
			}
		}
	}
}

// call runs fn against the running plugin and, when the plugin dies under
// it, again against the next one, until ctx ends. Before a repeat it makes
// sure the new plugin knows taskID (its handle may have been persisted
// after the restart recovered the others).
func (d *Driver) call(ctx context.Context, taskID string, fn func(*sdk.DriverClient) error) error {
	var failed *running
	for {
		r, err := d.in.acquire(ctx, true)
		if err != nil {
			return err
		}
		if failed != nil && taskID != "" {
			d.ensureRecovered(ctx, r, taskID)
		}
		err = fn(r.Val.client)
		if !errors.Is(err, sdk.ErrPluginShutdown) || ctx.Err() != nil {
			return err
		}
		d.in.logger.Warn("driver plugin went away during a call; repeating it once the plugin is back", "task_id", taskID, "error", err)
		d.in.gone(r)
		failed = r
	}
}

// once runs fn against the running plugin, waiting for one if the driver
// is restarting, without repeating it.
func (d *Driver) once(ctx context.Context, fn func(*sdk.DriverClient) error) error {
	r, err := d.in.acquire(ctx, true)
	if err != nil {
		return err
	}
	err = fn(r.Val.client)
	if errors.Is(err, sdk.ErrPluginShutdown) {
		d.in.gone(r)
	}
	return err
}

// ensureRecovered hands the persisted handle of taskID to r; what went wrong shows
// in the repeated call, so errors are only logged.
func (d *Driver) ensureRecovered(ctx context.Context, r *running, taskID string) {
	rec, ok, err := d.in.m.cfg.Store.TaskHandle(taskID)
	if err != nil || !ok {
		return
	}
	if err := r.Val.client.RecoverTask(ctx, rec.GetHandle()); err != nil {
		d.in.logger.Debug("recovering task before repeating a call", "task_id", taskID, "error", err)
	}
}
