// Package allocrunner runs one alloc on a client: its alloc hooks and a
// task runner (host/client/taskrunner) per task, in lifecycle order, and
// reports the alloc's status from its tasks' states.
//
// # Lifecycle
//
//  1. Prerun hooks (below). If one fails, no task starts: every task is
//     marked dead and failed with a "Setup Failure" event, and the alloc
//     fails. So does a new alloc whose record the state DB could not
//     write (a full disk): a restarted client would not know it.
//  2. Prestart tasks (lifecycle hook "prestart") start together; the alloc
//     waits until every non-sidecar one has completed. One that fails for
//     good (after its restarts) fails the alloc: main tasks never start.
//     Prestart sidecars keep running beside the main tasks.
//  3. Main tasks start together; once none is pending, poststart tasks
//     (sidecar or not) start.
//  4. The main tasks run until all are dead, the leader task (leader =
//     true) is dead, or one has failed for good; then the others are
//     stopped ("leader task exited", "sibling task failed"). A stop from
//     the servers (desired status stop or evict) stops them too, each with
//     its kill_signal and kill_timeout.
//  5. Sidecars and poststart tasks still running are stopped.
//  6. Poststop tasks run to completion (also after a stop).
//  7. Tasks that never started are marked dead; postrun hooks run.
//
// The alloc waits for each task runner to stop (taskrunner Stopped: dead,
// no process of it left), not for its driver to forget the last attempt
// (DestroyTask), which goes on beside the postrun hooks; Done waits for
// both.
//
// The alloc's client status: failed if a task failed for good, complete
// when every task is dead, running while one runs, pending before. Every
// task state change is reported through Config.OnUpdate as an
// AllocClientUpdate, and persisted (state DB: TaskStateRecord, with the
// driver task ID of the running attempt) before it is reported when what
// recovery needs changed — the state, its times, the restarts, the
// attempt; events alone ride along with the next such write; the alloc and its job are
// persisted (AllocRecord) before anything starts and on every update. A
// write that fails after the alloc started (a full disk) is made again,
// with capped backoff, until it succeeds, so the DB converges on what
// runs once the disk has room, without a restart.
//
// # Hooks
//
// Alloc hooks implement any of PrerunHook, UpdateHook, PostrunHook and
// AllocDestroyHook of package runhooks (internal/runhooks, the hook
// contract), found by type assertion. The built-in alloc_dir hook comes
// first (it builds <data_dir>/alloc/<alloc>/ and its shared dir at prerun
// and removes the whole tree at destroy, so it builds first and removes
// last), then the hooks Config.Hooks.Alloc builds, in order. Each call has
// a deadline: Config.HookTimeout (default 1m) or the hook's own Timeout
// (runhooks.Timeouter).
//
//   - Prerun, in registration order, before any task starts — and again,
//     with Recovered set, for an alloc recovered after a client restart. A
//     prerun hook may block until what the tasks need is ready (a volume
//     claim): a stop from the servers cancels its context. The first error
//     stops the chain and fails the alloc (step 1).
//   - Update, in registration order, when the servers change the alloc
//     (a new alloc_modify_index) and it still runs (an in-place update).
//     Errors are logged. The task runners take the new alloc and job for
//     their next start; running tasks are not restarted.
//   - Postrun, in reverse order, once every task is dead for good (also
//     after a failed prerun). It may run again for an alloc recovered after
//     it had finished, so it must be idempotent. Errors are logged.
//   - Destroy, in reverse order, when the alloc is destroyed (Destroy: the
//     servers no longer send it), after the task runners' destroy hooks.
//     Not on client shutdown.
//
// Task hooks are added per task by Config.Hooks.Task factories; see
// package taskrunner for their contract. A factory returning nil adds
// nothing, so the csi_plugin supervisor registers for tasks with a
// csi_plugin block only, and the volume hook for groups with volumes.
//
// # Shutdown and recovery
//
// Shutdown stops supervising without stopping any task. A runner built
// with Config.Restore (the task states and handles the state DB kept)
// recovers running tasks through their drivers and resumes the lifecycle
// where the states say it was: dead tasks stay dead and are not run again.
package allocrunner
