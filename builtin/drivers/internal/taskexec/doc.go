// Package taskexec is the task lifecycle shared by the built-in drivers
// that run tasks under sdk/executor: raw_exec (unisolated) and exec
// (namespaces, chroot, cgroups).
//
// A driver builds a Core with its name and a Flavor, and embeds it: the
// Core implements StartTask, WaitTask, StopTask, DestroyTask, InspectTask,
// SignalTask, RecoverTask and TaskEvents. The Flavor turns a task config
// into the executor's Spec (setting up what the task needs, e.g. a cgroup),
// releases that again when the task is destroyed, and adds what only it
// knows to a task's exit (an OOM kill).
//
// Each task runs under an executor that outlives the plugin. Its state
// (exit status file, executor identity) lives in
// "<task_dir>/<StateSubdir>/<task id>"; the handle carries the executor's
// and the task's PID and start time, so a restarted plugin recovers the
// task (RecoverTask) and WaitTask still reports the real exit code. A
// reused PID is never taken for the task. StopTask signals the task's
// process group, then SIGKILLs it after the timeout.
package taskexec
