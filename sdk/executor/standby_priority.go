package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A standby starts (the executing and initialising of this binary, twice
// for an isolated one) while other work runs: on a busy machine it would
// take the CPU from that work, a task stopping, say. So it runs under
// SCHED_IDLE (only when nothing else wants the CPU, and preempted at once
// when something does) until its spec comes, and then puts every one of
// its threads, and its namespace init's, back to the scheduling policy
// and nice value of the driver that started it, before the task is
// forked: the task runs as it would have without a standby. Scheduling
// attributes are per thread on Linux: the standby is forked from a thread
// set idle for that alone and discarded after, and a process's threads
// are reset one by one (twice, for threads a not yet reset one made
// meanwhile). Leaving SCHED_IDLE may need CAP_SYS_NICE, so a standby
// started without root runs as the driver does throughout.

// schedEnv carries the policy and nice value ("POLICY:NICE") a standby
// returns to.
const schedEnv = "BERTH_EXECUTOR_SCHED"

// spawnIdle is spawn under SCHED_IDLE, with the attributes to return to in
// the environment; it returns them too (nil when the standby is not idle).
func spawnIdle(command Command, marker string, out *os.File) (*spawned, *unix.SchedAttr, error) {
	if os.Geteuid() != 0 {
		ex, err := spawn(command, marker, out)
		return ex, nil, err
	}
	type result struct {
		ex   *spawned
		back *unix.SchedAttr
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, idle, ends with this goroutine.
		runtime.LockOSThread()
		cur, err := unix.SchedGetAttr(0, 0)
		if err == nil {
			err = unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE, Nice: 19}, 0)
		}
		if err != nil {
			ex, err := spawn(command, marker, out)
			done <- result{ex, nil, err}
			return
		}
		back := &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: cur.Policy, Nice: cur.Nice}
		ex, err := spawn(command, marker, out, fmt.Sprintf("%s=%d:%d", schedEnv, cur.Policy, cur.Nice))
		done <- result{ex, back, err}
	}()
	r := <-done
	return r.ex, r.back, r.err
}

// wakeProcess sets every thread of pid, and of its children, to attr. A
// driver does it to the standby it takes, before sending the spec: an idle
// process on a busy machine may not run for a long time, and a start must
// not wait for it to get the CPU to restore itself.
func wakeProcess(pid int, attr *unix.SchedAttr) {
	pids := []int{pid}
	threads, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, th := range threads {
		data, _ := os.ReadFile(th)
		for _, f := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(f); err == nil {
				pids = append(pids, c)
			}
		}
	}
	for _, p := range pids {
		tids, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		for _, t := range tids {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				_ = unix.SchedSetAttr(tid, attr, 0) // a thread gone meanwhile needs nothing
			}
		}
	}
}

// initEnv is a namespace init's environment: its marker, and the
// scheduling to return to when this executor has one.
func initEnv() []string {
	env := []string{markerEnv + "=" + initValue}
	if v := os.Getenv(schedEnv); v != "" {
		env = append(env, schedEnv+"="+v)
	}
	return env
}

// restorePriority sets every thread of this process to the scheduling in
// schedEnv, if set.
func restorePriority() {
	v := os.Getenv(schedEnv)
	if v == "" {
		return
	}
	var policy uint32
	var nice int32
	if _, err := fmt.Sscanf(v, "%d:%d", &policy, &nice); err != nil {
		fmt.Fprintf(os.Stderr, "executor: %s=%q: %v\n", schedEnv, v, err)
		return
	}
	attr := &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: policy, Nice: nice}
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			fmt.Fprintf(os.Stderr, "executor: restoring its scheduling: %v\n", err)
			return
		}
		for _, t := range tasks {
			tid, ok := ownTID(t.Name())
			if !ok {
				continue
			}
			if err := unix.SchedSetAttr(tid, attr, 0); err != nil && err != unix.ESRCH {
				fmt.Fprintf(os.Stderr, "executor: restoring thread %d's scheduling to %s: %v\n", tid, v, err)
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
