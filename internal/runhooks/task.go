package runhooks

import (
	"context"

	"berth.dev/berth/internal/allocdir"
	"berth.dev/berth/internal/taskenv"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// TaskInfo is what every hook call is told about its task.
type TaskInfo struct {
	Alloc *pb.Allocation
	Job   *pb.Job
	Group *pb.TaskGroup
	Task  *pb.Task
	Node  taskenv.Node
	Dir   allocdir.TaskDir
	// Events records task events.
	Events Emitter
	// Lifecycle lets a hook restart its task (the runner sets it).
	Lifecycle Lifecycle
	// Driver tells a hook what the task's driver does with a TaskConfig
	// (the runner sets it).
	Driver MountsHonourer
}

// Lifecycle is what a hook may ask of its task runner. Its methods never
// block and may be called from any goroutine, during a hook call or later
// (from a supervisor a hook started): they only signal the runner.
type Lifecycle interface {
	// Restart stops the running attempt taskID (stop hooks, kill_signal,
	// kill_timeout) and starts the task again. With failure the restart
	// counts against the group's restart policy as a crash does: its
	// delay, attempts per interval and mode apply, and past them the task
	// fails for good ("Not Restarting"). Without failure the task starts
	// again at once, uncounted, like `alloc restart`. A "Restart Signaled"
	// event carries reason. Restart fails when taskID is not the running
	// attempt (it exited meanwhile), so a late request never restarts the
	// next attempt, and once the task will not run again (the task
	// runner's ErrTaskNotRunning and ErrTaskDead). While a restart is
	// pending for the attempt, another one is not queued.
	Restart(taskID, reason string, failure bool) error
}

// MountsHonourer reports whether a driver gives a task the mounts of its
// TaskConfig: an isolating driver (exec) does, and its task sees only
// what is mounted; an unisolated one (raw_exec) refuses mounts, and its
// task sees host paths. taskdrivers.Driver implements it; as a Driver's
// optional interface, a driver without it is taken as unisolated.
type MountsHonourer interface {
	HonoursMounts(ctx context.Context) (bool, error)
}

// PrestartRequest is given to PrestartHook.Prestart.
type PrestartRequest struct {
	TaskInfo
	// Env and Vars are the environment and interpolation variables the
	// hooks before this one built (read-only copies).
	Env, Vars map[string]string
	// Recovered is set when the task was found running after a client
	// restart: it is not started again, and the response is not used, but
	// a hook rebuilds what it keeps in memory (a plugin registration, a
	// supervisor).
	Recovered bool
	// Attempt counts start attempts of this runner from 1.
	Attempt int
}

// PrestartResponse is a hook's mutation of the task's config.
type PrestartResponse struct {
	// Env is added to the task's environment (a later hook's value wins).
	Env map[string]string
	// Vars are added to the interpolation variables (volume.<name>, ...).
	Vars map[string]string
	// Mounts are added to the task's mounts (for drivers that honour them).
	Mounts []*driverpb.Mount
}

// PrestartHook runs before every start of the task.
type PrestartHook interface {
	Hook
	Prestart(ctx context.Context, req *PrestartRequest, resp *PrestartResponse) error
}

// PoststartRequest is given to PoststartHook.Poststart.
type PoststartRequest struct {
	TaskInfo
	// TaskID is the driver task ID of the attempt that started.
	TaskID string
	// Recovered: see PrestartRequest.
	Recovered bool
}

// PoststartHook runs after every successful start (and recovery).
type PoststartHook interface {
	Hook
	Poststart(ctx context.Context, req *PoststartRequest) error
}

// StopRequest is given to StopHook.Stop.
type StopRequest struct {
	TaskInfo
	TaskID string
	// Reason is why the task is stopped ("alloc stopped by the servers",
	// "restart requested", "leader task exited").
	Reason string
	// Restart is set when the attempt is stopped to start again (a
	// restart asked for through Lifecycle.Restart), not killed.
	Restart bool
}

// StopHook runs before the runner stops a running task (a kill or a
// requested restart), before the kill signal is sent.
type StopHook interface {
	Hook
	Stop(ctx context.Context, req *StopRequest) error
}

// ExitedRequest is given to ExitedHook.Exited.
type ExitedRequest struct {
	TaskInfo
	TaskID string
	// Result is how the attempt ended.
	Result *driverpb.ExitResult
}

// ExitedHook runs after every exit of a started attempt, whether or not
// the task is restarted — including an attempt found gone when a restarted
// client tried to recover it (Result then has exit code -1 and says so).
type ExitedHook interface {
	Hook
	Exited(ctx context.Context, req *ExitedRequest) error
}

// FinishedRequest is given to FinishedHook.Finished.
type FinishedRequest struct {
	TaskInfo
}

// FinishedHook runs once when the task is dead for good: killed, finished
// (an ephemeral task's success) or ended by its restart policy — after the
// last attempt's exited hooks, never between attempts, and not when the
// client shuts down (the task lives on for the next client). A runner
// restored with the task already dead runs it again (the client may have
// shut down as the task died): it must be idempotent.
type FinishedHook interface {
	Hook
	Finished(ctx context.Context, req *FinishedRequest) error
}

// TaskDestroyRequest is given to TaskDestroyHook.Destroy.
type TaskDestroyRequest struct {
	TaskInfo
}

// TaskDestroyHook runs once, when the task will never run again and the alloc
// is being destroyed.
type TaskDestroyHook interface {
	Hook
	Destroy(ctx context.Context, req *TaskDestroyRequest) error
}
