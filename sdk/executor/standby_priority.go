package executor

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A standby starts (the executing and initialising of this binary, twice
// for an isolated one) while other work runs: on a busy machine it would
// take the CPU from that work, a task stopping, say. So it runs at the
// lowest priority (nice 19) until its spec comes, and then puts every one
// of its threads, and its namespace init's, back to the priority of the
// driver that started it, before the task is forked: the task runs as it
// would have without a standby. Nice values are per thread on Linux: the
// standby is forked from a thread niced for that alone and discarded
// after, and a process's threads are reset one by one (twice, for threads
// a not yet reset one made meanwhile). Raising the priority back needs
// CAP_SYS_NICE, so a standby started without root runs at the driver's
// priority throughout.
const (
	standbyNice = 19
	// niceEnv carries the nice value a standby returns to.
	niceEnv = "BERTH_EXECUTOR_NICE"
)

// spawnIdle is spawn at nice 19, with the priority to return to in the
// environment.
func spawnIdle(command Command, marker string, out *os.File) (*spawned, error) {
	if os.Geteuid() != 0 {
		return spawn(command, marker, out)
	}
	type result struct {
		ex  *spawned
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, niced, ends with this goroutine.
		runtime.LockOSThread()
		prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
		if err != nil {
			ex, err := spawn(command, marker, out)
			done <- result{ex, err}
			return
		}
		nice := 20 - prio // the system call's value is 20 - nice
		if err := unix.Setpriority(unix.PRIO_PROCESS, 0, standbyNice); err != nil {
			ex, err := spawn(command, marker, out)
			done <- result{ex, err}
			return
		}
		ex, err := spawn(command, marker, out, niceEnv+"="+strconv.Itoa(nice))
		done <- result{ex, err}
	}()
	r := <-done
	return r.ex, r.err
}

// initEnv is a namespace init's environment: its marker, and the priority
// to return to when this executor has one.
func initEnv() []string {
	env := []string{markerEnv + "=" + initValue}
	if v := os.Getenv(niceEnv); v != "" {
		env = append(env, niceEnv+"="+v)
	}
	return env
}

// restorePriority sets every thread of this process to the nice value in
// niceEnv, if set.
func restorePriority() {
	v := os.Getenv(niceEnv)
	if v == "" {
		return
	}
	nice, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "executor: %s=%q: %v\n", niceEnv, v, err)
		return
	}
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			fmt.Fprintf(os.Stderr, "executor: restoring its priority: %v\n", err)
			return
		}
		for _, t := range tasks {
			tid, ok := ownTID(t.Name())
			if !ok {
				continue
			}
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil && err != unix.ESRCH {
				fmt.Fprintf(os.Stderr, "executor: restoring thread %d's priority to nice %d: %v\n", tid, nice, err)
			}
		}
	}
}

// ownTID is the ID, in this process's PID namespace, of its thread that
// /proc/self/task lists as name: /proc here may be the host's (a namespace
// init's, before it mounts its own), which names threads by their host
// IDs, and setpriority(2) takes the caller's. NSpid's last ID is the
// innermost.
func ownTID(name string) (int, bool) {
	data, err := os.ReadFile("/proc/self/task/" + name + "/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			tid, err := strconv.Atoi(f[len(f)-1])
			return tid, err == nil
		}
	}
	tid, err := strconv.Atoi(name)
	return tid, err == nil
}
