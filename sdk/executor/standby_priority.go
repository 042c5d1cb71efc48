package executor

import (
	"errors"
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
// its threads, and its namespace init's, back to the scheduling policy,
// real-time priority and nice value of the driver that started it, before
// the task is forked: the task runs as it would have without a standby.
// Scheduling attributes are per thread on Linux: the standby is forked
// from a thread set idle for that alone and discarded after, and a
// process's threads are reset one by one (twice, for threads a not yet
// reset one made meanwhile).
//
// Leaving SCHED_IDLE needs CAP_SYS_NICE (in the initial user namespace) or
// a large enough RLIMIT_NICE, which root does not always have (a container
// with Docker's default capabilities, root in a user namespace). So the
// thread that would fork the standby first goes idle and back: only when
// that works is the standby started idle, and a standby taken is checked,
// every thread, to be back at the driver's scheduling before its spec is
// sent (Standby.Start starts a new executor instead when it is not). A
// task never runs at a scheduling other than the driver's.

// schedEnv carries the policy, real-time priority and nice value
// ("POLICY:PRIORITY:NICE") a standby returns to.
const schedEnv = "BERTH_EXECUTOR_SCHED"

// idleAttr is a standby's scheduling until it is taken: a fresh value for
// each call, since unix.SchedSetAttr writes the Size field of what it is
// given (two standbys spawned at once raced on one shared value).
func idleAttr() *unix.SchedAttr {
	return &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE, Nice: 19}
}

// returnable is the scheduling a thread at cur returns to after idling,
// or false when a standby is not to be started idle: a policy this does
// not carry (SCHED_DEADLINE cannot fork), or flags (reset-on-fork would
// reset the standby's task however it was started).
func returnable(cur *unix.SchedAttr) (unix.SchedAttr, bool) {
	switch cur.Policy {
	case unix.SCHED_NORMAL, unix.SCHED_BATCH, unix.SCHED_FIFO, unix.SCHED_RR:
	default:
		return unix.SchedAttr{}, false
	}
	if cur.Flags != 0 {
		return unix.SchedAttr{}, false
	}
	return unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: cur.Policy, Priority: cur.Priority, Nice: cur.Nice}, true
}

// sameSched reports whether a thread at got runs as want says.
func sameSched(got, want *unix.SchedAttr) bool {
	return got.Policy == want.Policy && got.Priority == want.Priority && got.Nice == want.Nice
}

// spawnIdle is spawn under SCHED_IDLE, with the scheduling to return to in
// the environment; it returns that too (nil when the standby is not idle:
// this process could not return from idle, or its scheduling is not one a
// standby carries).
func spawnIdle(command Command, marker string, out *os.File) (*spawned, *unix.SchedAttr, error) {
	type result struct {
		ex      *spawned
		back    *unix.SchedAttr
		err     error
		notIdle bool
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, idle (or left wherever a failed
		// return put it), ends with this goroutine.
		runtime.LockOSThread()
		cur, err := unix.SchedGetAttr(0, 0)
		if err != nil {
			done <- result{notIdle: true}
			return
		}
		back, ok := returnable(cur)
		if !ok || !canReturn(&back) {
			done <- result{notIdle: true}
			return
		}
		if err := unix.SchedSetAttr(0, idleAttr(), 0); err != nil {
			done <- result{notIdle: true}
			return
		}
		ex, err := spawn(command, marker, out, fmt.Sprintf("%s=%d:%d:%d", schedEnv, back.Policy, back.Priority, back.Nice))
		done <- result{ex: ex, back: &back, err: err}
	}()
	r := <-done
	if r.notIdle {
		// From this goroutine's thread, not the locked one.
		ex, err := spawn(command, marker, out)
		return ex, nil, err
	}
	return r.ex, r.back, r.err
}

// canReturn reports whether the calling thread, at back, can go idle and
// come back to back (and is at back after).
func canReturn(back *unix.SchedAttr) bool {
	if err := unix.SchedSetAttr(0, idleAttr(), 0); err != nil {
		return false
	}
	if err := unix.SchedSetAttr(0, back, 0); err != nil {
		return false
	}
	now, err := unix.SchedGetAttr(0, 0)
	return err == nil && sameSched(now, back)
}

// wakeProcess sets every thread of pid, and of its children, to attr, and
// returns once one look at them all found them at attr (an error when
// three did not). A driver does it to the standby it takes, before sending
// the spec: an idle process on a busy machine may not run for a long time,
// and a start must not wait for it to get the CPU to restore itself; and a
// standby that cannot be brought back must not run a task.
func wakeProcess(pid int, attr *unix.SchedAttr) error {
	var last error
	for range 3 {
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
		last = nil
		for _, p := range pids {
			tids, err := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
			if err != nil && p == pid {
				return fmt.Errorf("standby executor %d: %w", pid, err)
			}
			for _, t := range tids {
				tid, err := strconv.Atoi(t.Name())
				if err != nil {
					continue
				}
				got, err := unix.SchedGetAttr(tid, 0)
				if err == unix.ESRCH {
					continue // a thread gone needs nothing
				}
				if err == nil && sameSched(got, attr) {
					continue
				}
				if err == nil {
					err = unix.SchedSetAttr(tid, attr, 0)
				}
				if err == unix.ESRCH {
					continue
				}
				last = fmt.Errorf("thread %d of %d not at the driver's scheduling (policy %d, priority %d, nice %d)", tid, p, attr.Policy, attr.Priority, attr.Nice)
				if err != nil {
					last = fmt.Errorf("%w: %w", last, err)
				}
			}
		}
		if last == nil {
			return nil
		}
	}
	return last
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
// schedEnv, if set. An error means a thread may still be idle: a task
// forked now might be too, and is not to be started.
func restorePriority() error {
	v := os.Getenv(schedEnv)
	if v == "" {
		return nil
	}
	attr, err := parseSched(v)
	if err != nil {
		return err
	}
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("restoring its scheduling: %w", err)
		}
		for _, t := range tasks {
			tid, ok := ownTID(t.Name())
			if !ok {
				continue
			}
			if err := unix.SchedSetAttr(tid, attr, 0); err != nil && err != unix.ESRCH {
				return fmt.Errorf("restoring thread %d's scheduling to %s: %w", tid, v, err)
			}
		}
	}
	return nil
}

// parseSched reads schedEnv's value: POLICY:PRIORITY:NICE, or the
// POLICY:NICE of a driver built before real-time priorities were carried.
func parseSched(v string) (*unix.SchedAttr, error) {
	var policy uint32
	var prio uint32
	var nice int32
	f := strings.Split(v, ":")
	var err error
	switch len(f) {
	case 3:
		_, err = fmt.Sscanf(v, "%d:%d:%d", &policy, &prio, &nice)
	case 2:
		_, err = fmt.Sscanf(v, "%d:%d", &policy, &nice)
	default:
		err = errors.New("want POLICY:PRIORITY:NICE")
	}
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", schedEnv, v, err)
	}
	return &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: policy, Priority: prio, Nice: nice}, nil
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
