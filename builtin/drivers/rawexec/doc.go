// Package rawexec is the raw_exec task driver: it runs a command with its
// arguments, environment and working directory directly on the host, with
// no isolation, as the agent's user (or TaskConfig.user).
//
// Because it runs commands unisolated it is off until the operator turns it
// on in the plugin config:
//
//	plugin "raw_exec" {
//	  config { enabled = true }
//	}
//
// Until then its fingerprint is undetected, saying so, and StartTask fails
// with sdk.ErrDriverUnhealthy.
//
// raw_exec does not honour TaskConfig.mounts and does not advertise
// mount_volumes: a task that sees the whole host filesystem has nothing to
// bind into. Its tasks are given host paths instead (through their
// environment and interpolation), and berth refuses to start a task with
// mounts on it rather than drop them.
//
// A task whose program is missing or not executable, or whose working
// directory is not there, fails StartTask with sdk.ErrTaskStartFailed and an
// *sdk.StartError naming the reason and the path: the executor finds out
// (it execs the program) and reports it as a typed record, not as text.
//
// Task config:
//
//	command  string        required; looked up in the task's PATH when it has no slash
//	args     list(string)  arguments
//	cwd      string        working directory, relative to the task directory (default: the task directory)
//
// Each task runs under an executor (sdk/executor): a re-execution of the
// plugin binary that starts the command in its own process group, writes
// its stdout and stderr to "<log_dir>/<name>.stdout.N" and ".stderr.N"
// (rotated by TaskConfig.logs), waits for it and records its exit status in
// the task's state directory "<task_dir>/.rawexec/<task id>". The task
// therefore outlives the plugin: a new plugin process recovers it from its
// handle (executor and task identified by PID and start time, so a reused
// PID is never mistaken for them) and WaitTask still reports the real exit
// code. StopTask signals the whole process group, then SIGKILLs it after
// the timeout. ExecTask runs a command with the task's environment and
// working directory; TaskStats sums CPU and memory over the process group.
package rawexec
