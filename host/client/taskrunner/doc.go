// Package taskrunner runs one task of an alloc on a client: its hooks, the
// driver calls that start, wait for, stop and destroy each attempt, and
// its restarts per the group's restart block. The alloc runner
// (host/client/allocrunner) makes one per task and decides when each runs.
//
// # Attempts
//
// Each start is an attempt with a driver task ID of its own,
// "<alloc>.<task>.<random>", persisted (with the task's state) through
// Config.OnState before the driver starts it, so a restarted client knows
// which attempt to recover. An attempt whose record cannot be written (a
// full disk) is not started: a failed "Setup Failure" event (reason
// state-not-persisted) names the error and the restart policy decides.
// The attempt's TaskConfig carries the environment and mounts the prestart
// hooks built, the driver config interpolated with them (package taskenv)
// after every prestart hook ran, cpu_shares (cpu_mhz × 1024 / MHz per
// core) and memory_bytes, the task's user and log limits. WaitTask gives
// the exit; StopTask (kill_signal, then SIGKILL after kill_timeout, default
// 5s) stops it; DestroyTask (which deletes its persisted handle) follows
// every exit: before the next attempt starts, or, for a killed task's last
// attempt whose exit WaitTask returned, after Stopped is closed (the task
// dead, its processes gone) and before Done (stopped.go), so what waits for
// the stop (the alloc's volume teardown) does not wait for the driver's
// bookkeeping. An attempt whose WaitTask failed, and one a restored dead
// task's record names, are destroyed before Stopped; a Shutdown leaving
// the task running never closes Stopped.
//
// # Restarts
//
// An exit of an ephemeral task (batch main tasks, non-sidecar prestart and
// poststart tasks, poststop tasks) with code 0 ends the task. Any other
// exit, a failed start and a failed prestart hook count against the
// restart policy — except a prestart error a hook marked
// runhooks.Unrecoverable (a csi_plugin socket path too long for the node)
// and a start over the plugin's message limit, which no retry can fix:
// those end the task at once, failed ("Not Restarting", reason
// unrecoverable or request-too-large). Every failed start is logged at
// ERROR with the alloc, the task, the attempt and the error. The policy
// allows at most attempts restarts per interval, each after delay
// ("Restarting" with restart_in_ms); past that, mode fail ends the task as
// failed ("Not Restarting") and mode delay waits for the interval to end.
// A group without a restart block gets Nomad's defaults (service 2 in
// 30m, batch 3 in 24h, 15s delay, mode fail). Restart (alloc restart)
// stops the attempt and starts again at once without counting.
//
// Events use the words of alloc.proto's TaskEvent: "Received" (by the
// alloc runner), "Task Setup", "Setup Failure", "Driver Failure" (with
// details reason and path of a *sdk.StartError), "Started" (task_id),
// "Terminated" (exit_code, signal, oom_killed), "Restart Signaled",
// "Restarting", "Not Restarting", "Killing" (kill_timeout_ms, reason),
// "Killed", "Failed Restoring", "Hook Failed", and "Driver" for what the
// task's driver said about it (DriverEvent: its message, its annotations
// as details; coalesced, rate-limited and bounded, see driverevents.go).
// A task state keeps its last 10 events.
//
// # Hooks
//
// A hook is a value with a Name that implements any of PrestartHook,
// PoststartHook, StopHook, ExitedHook, FinishedHook and TaskDestroyHook of
// package runhooks (internal/runhooks, the hook contract); the runner finds the
// phases by type assertion. Every call gets a context with a deadline
// (Config.HookTimeout, default 1m, or the hook's own Timeout if it
// implements runhooks.Timeouter) that also ends when the runner is shut down. The
// built-in hooks come first (BuiltinHooks: task_dir, task_env), then
// Config.Hooks in order. Order and guarantees:
//
//   - Prestart, in registration order, before every attempt. Each hook
//     sees the Env and Vars the hooks before it built and answers with a
//     runhooks.PrestartResponse — env vars to add (a later hook's value wins), vars
//     for interpolation (${volume.<name>}), mounts — the "TaskConfig
//     mutation". The first error stops the chain: no attempt is started,
//     no poststart, stop or exited hook runs for it, a failed "Setup
//     Failure" event is recorded, the error is logged, and the restart
//     policy decides — unless the error is runhooks.Unrecoverable: then
//     the task is dead and failed at once. A kill
//     cancels the context of a prestart hook that waits. After a
//     client restart, a task found running is not started again, but the
//     prestart hooks run with Recovered set (Attempt 0) so a hook rebuilds
//     its in-memory state; their response is not used.
//   - Poststart, in registration order, after every successful start and
//     after a recovery (Recovered set). An error is a "Hook Failed" event;
//     the task keeps running.
//   - Stop, in reverse order, before the runner stops a running attempt
//     (a kill, or a requested restart: StopRequest.Restart), before the
//     kill signal is sent.
//   - Exited, in reverse order, after every exit of a started attempt,
//     before the restart decision.
//   - Finished, in reverse order, once, when the task is dead for good
//     (killed, finished, or ended by the restart policy); not between
//     attempts and not on client shutdown. Run on a task restored dead
//     runs them again (the client may have shut down as the task died),
//     so they must be idempotent.
//   - Destroy, in reverse order, once, from Destroy, when the alloc is
//     destroyed — whether or not the task ever started or a prestart hook
//     failed. Not on client shutdown (the task lives on).
//
// Teardown failures (stop, exited, finished, destroy) are "Hook Failed" events and
// log lines; the other hooks still run. A hook records task events with
// runhooks.TaskInfo.Events. Hooks must not call back into the runner, except through
// what runhooks.TaskInfo hands them, which never blocks:
//
//   - runhooks.TaskInfo.Lifecycle.Restart(taskID, reason, failure) restarts the
//     running attempt taskID from any goroutine (a supervisor the hook
//     started, say the csi_plugin supervisor whose plugin never became
//     healthy). With failure it counts against the restart policy exactly
//     as a crash: "Restart Signaled" (details reason, failure), then the
//     policy's "Restarting" after its delay or "Not Restarting". Without
//     failure it is an uncounted restart at once, as Restart. A request
//     for an attempt that has ended is refused (ErrTaskNotRunning) or, if
//     it raced the exit, dropped: it never restarts the next attempt.
//   - runhooks.TaskInfo.Driver.HonoursMounts tells whether the task's driver gives
//     it the TaskConfig's mounts (an isolating driver; the Driver's
//     optional runhooks.MountsHonourer, which taskdrivers.Driver implements) or runs
//     it on the host's filesystem, so a hook picks task paths and mounts or
//     host paths.
//
// # Client restarts
//
// Config.Restore carries the state and the handle of the attempt that ran
// when the client stopped (gracefully or not). The runner gives the handle
// to the driver's RecoverTask and supervises the same process; if the
// driver cannot take it back, or the state names a running attempt whose
// handle the DB does not hold (its end was not written), the attempt
// counts as failed ("Failed Restoring", its exited hooks run) and the
// restart policy decides. Any attempt the state names without a handle
// (pending: the client stopped before the driver's handle was written, and
// the plugin may have started it) is destroyed (DestroyTask, not-found is
// fine) before another starts. Shutdown stops supervising without touching
// the task.
package taskrunner
