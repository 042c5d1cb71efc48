// Package runhooks is the contract between the client's runners and the
// hooks plugged into them: the alloc runner (host/client/allocrunner) calls
// alloc hooks around an alloc's tasks, the task runner
// (host/client/taskrunner) calls task hooks around each attempt of a task.
// It holds the hook interfaces and what each call is told and may answer,
// nothing else, and imports nothing of host/, so a package of hooks
// (volumehooks: the volume hook and the csi_plugin supervisor) implements
// them without linking the runners.
//
// # Writing a hook
//
// A hook is a value with a Name (Hook) that implements any of the phase
// interfaces; a runner finds the phases by type assertion, so a hook
// implements only what it needs. It may implement Timeouter to set the
// deadline of its calls instead of the runner's default (1m). Keep a
// compile-time assertion beside each implementation:
//
//	var (
//		_ runhooks.PrerunHook       = (*volumeHook)(nil)
//		_ runhooks.AllocDestroyHook = (*volumeHook)(nil)
//	)
//
// The client registers hooks as factories (allocrunner.Hooks): one is
// called for every alloc (or task) with its AllocInfo and returns nil when
// it has nothing to do there.
//
// # Alloc hooks
//
// PrerunHook (registration order, before any task starts, again with
// Recovered after a client restart; an error fails the alloc), UpdateHook
// (in-place updates of a running alloc), PostrunHook (reverse order, once
// every task is dead for good; idempotent) and AllocDestroyHook (reverse
// order, when the servers no longer send the alloc). Each is told the
// AllocInfo; AllocInfo.Events records a task event on every task of the
// alloc.
//
// # Task hooks
//
// PrestartHook (registration order, before every attempt; it answers with
// a PrestartResponse: env vars, interpolation vars, mounts), PoststartHook
// (after every start and recovery), StopHook (before a running attempt is
// stopped), ExitedHook (after every exit), FinishedHook (once, when the
// task is dead for good) and TaskDestroyHook (once, when the alloc is
// destroyed), all but the first two in reverse order. Each is told the
// TaskInfo, whose Lifecycle lets a hook restart its task and whose Driver
// says whether the task sees the mounts it is given.
//
// # Errors
//
// A hook error is retried as the runner's rules say (a failed prestart
// counts against the task's restart policy). A hook that knows no retry
// can fix its error — the node cannot give the task what it asks for —
// wraps it with Unrecoverable, and the task fails at once.
//
// The order and the guarantees of each phase (what an error does, what
// runs again after a client restart) are the runners' and are written in
// their package docs.
package runhooks
