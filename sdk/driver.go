package sdk

import (
	"context"
	"iter"
	"time"

	"berth.dev/berth/sdk/driverpb"
)

// Driver is what a task driver implements and what DriverClient implements
// over the plugin connection, so berth and drivertest call both alike.
//
// Every method may be called concurrently. Methods that block honour ctx;
// streams (Fingerprint, TaskEvents) end when ctx is done or the iteration
// stops. Errors wrap the sentinels in errors.go (ErrTaskNotFound, ...) so
// that they keep their meaning across the process boundary.
type Driver interface {
	PluginBase
	TaskLifecycle
	TaskObserver
}

// PluginBase is what a driver says about itself.
type PluginBase interface {
	// PluginInfo returns the driver's name and version.
	PluginInfo(ctx context.Context) (*driverpb.PluginInfo, error)
	// Capabilities returns the driver's optional features.
	Capabilities(ctx context.Context) (*driverpb.DriverCapabilities, error)
	// ConfigSchema returns the schemas of the plugin config and task config.
	ConfigSchema(ctx context.Context) (*driverpb.ConfigSchemas, error)
	// SetConfig applies the plugin config; invalid configs return
	// *ConfigError values (ErrInvalidConfig).
	SetConfig(ctx context.Context, cfg *driverpb.PluginConfig) error
	// Fingerprint yields the driver's current fingerprint at once and then
	// each change, until ctx is done; a failure ends it with an error.
	Fingerprint(ctx context.Context) iter.Seq2[*driverpb.DriverFingerprint, error]
}

// TaskLifecycle starts, waits for, stops and recovers tasks.
type TaskLifecycle interface {
	// StartTask starts a task and returns once it runs, with the handle the
	// caller persists for RecoverTask. A bad driver config is
	// ErrInvalidConfig; an ID in use is ErrTaskExists.
	StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error)
	// WaitTask blocks until the task exits (or ctx is done) and returns how.
	// An exit (a nil error) also says that no process of the task runs any
	// more, children included, and that none of its mounts is held outside
	// the task's own namespaces: the client unpublishes the task's volumes
	// on it, before DestroyTask. A driver whose tasks' processes can
	// outlive the one it waits for ends them first: an exec task's PID
	// namespace ends with its init; raw_exec, which isolates nothing,
	// SIGKILLs the task's process group and waits for the task's output
	// pipes to close before it records the exit (a process that left the
	// group on purpose, with setsid, is not tracked). The conformance
	// harness checks it for a child of the task (drivertest,
	// Cases.WithChild).
	WaitTask(ctx context.Context, taskID string) (*driverpb.ExitResult, error)
	// StopTask sends signal (empty: SIGTERM), kills the task if it has not
	// exited after timeout, and returns once it has exited. Stopping an
	// exited task returns nil.
	StopTask(ctx context.Context, taskID string, timeout time.Duration, signal string) error
	// DestroyTask forgets the task. A running task is ErrTaskRunning unless
	// force, which kills it first. An unknown task returns nil.
	DestroyTask(ctx context.Context, taskID string, force bool) error
	// RecoverTask re-attaches to a task from its handle after a driver or
	// client restart. A known task returns nil; a task that is gone without
	// a recorded exit is ErrTaskNotFound; a foreign or corrupt handle is
	// ErrInvalidHandle.
	RecoverTask(ctx context.Context, handle *driverpb.TaskHandle) error
}

// TaskObserver looks at and pokes running tasks.
type TaskObserver interface {
	// InspectTask returns the task's state.
	InspectTask(ctx context.Context, taskID string) (*driverpb.TaskStatus, error)
	// SignalTask sends a signal by name ("SIGHUP") to a running task.
	SignalTask(ctx context.Context, taskID string, signal string) error
	// TaskEvents yields events about all of the driver's tasks until ctx is
	// done. Delivery is best effort.
	TaskEvents(ctx context.Context) iter.Seq2[*driverpb.TaskEvent, error]
}

// ExecDriver is implemented by drivers with the exec capability.
type ExecDriver interface {
	// ExecTask runs command in the task's context and returns its output,
	// killing it after timeout.
	ExecTask(ctx context.Context, taskID string, command []string, timeout time.Duration) (*driverpb.ExecResult, error)
}

// StatsDriver is implemented by drivers with the stats capability.
type StatsDriver interface {
	// TaskStats yields the task's resource usage every interval until the
	// task exits or ctx is done.
	TaskStats(ctx context.Context, taskID string, interval time.Duration) iter.Seq2[*driverpb.TaskResourceUsage, error]
}
