// Package executor runs a task's process under a small supervisor so the
// task outlives the driver plugin that started it and its exit status is
// never lost.
//
// A driver plugin cannot simply fork the task: when the plugin restarts
// (crash, upgrade, kill -9) the task is no longer its child, and only a
// parent can learn a process's exit status. So the driver re-executes its
// own binary as an executor (Start), in a session of its own, and the
// executor starts the task in a new process group, copies its stdout and
// stderr into rotating log files, waits for it, and writes how it exited to
// exit.json in the task's state directory. A restarted driver finds the
// executor again from the persisted State (Recover) and watches for that
// file, so WaitTask on a recovered task still reports the real exit code.
//
// A task that does not start (its program missing or not executable, its
// working directory not there) is reported on the status pipe as a typed
// record and returned by Start as a *StartError, which a driver maps to
// sdk.StartError; no one reads the message.
//
// A Spec with an Isolation runs the task confined: the executor starts a
// namespace init (this binary again, with new mount, PID, IPC and UTS
// namespaces), writes its PID into the cgroups the Spec names, and sends it
// the Spec. The init builds the task's root (read-only binds, mounts with
// their propagation, /proc, a small /dev, masks), pivot_roots into it,
// limits the capability bounding set, sets no_new_privs, and starts the
// task. It stays PID 1 of the namespace, forwarding signals and reaping
// orphans, and reports the task's own wait status; when the task exits,
// the namespace and whatever the task left in it die with the init. A Bind
// that propagates needs its source to be a shared mount point on the host
// (EnsureShared; ReleaseShared undoes it). With Isolation.Exec the init
// also runs commands inside the task for ExecIn.
//
// NewStandby starts an executor ahead of the task it will run (and, for an
// isolated one, its namespace init), so that a start waits for neither to
// be executed and initialised; Standby.Start gives it its spec. An init
// started ahead is used only if it sees every mount the task's root is
// built from (standby.go, standby_mounts.go). NewStandby's command must be
// built with this SDK version or later: a binary of an older one does not
// know it was started as a standby, and Standby.Start, finding no ready
// byte from it within a bound, ends it and starts a new executor.
//
// Processes are named by procfs.Identity (PID and start time), so a PID
// reused after the executor or task died is never taken for them.
//
// Any binary that serves a driver with sdk.ServeDriver is an executor too:
// ServeDriver calls Main when Requested reports that the process was
// started as one. A binary that starts drivers another way must do the
// same, first thing in main:
//
//	if executor.Requested() {
//		os.Exit(executor.Main())
//	}
//
// The executor is Linux-only (process groups, /proc, parent-death signal).
package executor
