// Package execdriver is the exec task driver: it runs a command isolated
// from the host, in its own mount, PID, IPC and UTS namespaces, with the
// task directory as its root, and with cgroup limits on memory and CPU.
//
// It is off until the operator turns it on, and needs root:
//
//	plugin "exec" {
//	  config {
//	    enabled    = true
//	    chroot_env = { "/bin" = "/bin", "/usr" = "/usr", ... }   # optional
//	  }
//	}
//
// Until then its fingerprint says why (disabled, "exec requires root",
// no cgroups) and StartTask fails with sdk.ErrDriverUnhealthy.
//
// Each task runs under sdk/executor with an executor.Isolation: the
// executor (a re-execution of the plugin binary, as for raw_exec) starts a
// namespace init with clone flags; the init bind-mounts chroot_env (the
// host's /bin, /etc, /lib*, /sbin, /usr by default) read-only into the
// task directory, not copying anything, adds /proc, a small /dev and /tmp,
// binds TaskConfig.mounts with their propagation (private, host-to-task =
// rslave, bidirectional = rshared, the host side made a shared mount point
// first), pivot_roots, sets the hostname (the task's name), drops
// capabilities from the bounding set (Docker's default set, changed by
// cap_add and cap_drop), sets no_new_privs unless no_new_privs = false,
// and starts the task as the task's user. The init is PID 1 of the task's
// namespace: it forwards signals, reaps orphans and reports the task's
// wait status; when the task exits the kernel kills the rest of the
// namespace, so a daemon the task started does not outlive it.
//
// Before the init starts the task it is put in the task's cgroup (v1 or
// v2, created by github.com/containerd/cgroups with the task's memory
// limit and CPU shares); an exit after an OOM kill in that cgroup is
// reported as oom_killed, with an "OOM killed" event, and TaskStats reads
// CPU time, memory and processes from it. The cgroup is removed in the
// background once the task's exit is read (and by DestroyTask at the
// latest); the plugin's exit waits briefly for removals under way, and
// its start sweeps the empty ones an earlier plugin process left.
//
// ExecTask runs a command inside the task: the init takes it on a unix
// socket in the task's state directory and forks it like the task.
//
// Recovery after a plugin or client restart is raw_exec's (the shared
// taskexec.Core): the executor outlives the plugin, the task is found again
// by PID and start time, and WaitTask reports its real exit code.
//
// Task config:
//
//	command       string        required; looked up in the task's PATH, inside its root, when it has no slash
//	args          list(string)  arguments
//	cwd           string        working directory inside the task's root (default /)
//	cap_add       list(string)  capabilities added to the default set ("NET_ADMIN", "all")
//	cap_drop      list(string)  capabilities removed from it ("all" drops every one)
//	no_new_privs  bool          default true
package execdriver
