package executor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"berth.dev/berth/sdk/procfs"
)

// An isolated task's signals go to its own process group, not through its
// namespace init. The init forwards what it receives, but forwarding takes
// a wake-up of the init (a Go program: the signal's thread, the runtime's
// signal goroutine, its loop) before the task's own, and on a busy machine
// each wake-up waits for a CPU: a job stop spent 0.1–14 ms in the init
// before the task got its TERM (issue 26's trace of csiflow). So the
// executor records the task's host PID (its process group leader; the
// init forked it into a group of its own) as State.Group, and Signal sends
// a stop's signal straight to that group. SIGKILL still goes to the init:
// its death ends the whole namespace, whatever left the task's group.
// The direct signal needs the leader to be the process recorded, still in
// its own group and still the init's child; otherwise (the leader exited,
// or moved to another group, or the handle's Group is not its Task's) the
// signal goes through the init as before, and so does one whose handle
// predates Group. Children the leader left behind in its group when it
// moved are then signalled by the init's forwarding, as they were before.

// initChild returns the identity of the one child of the namespace init
// initPid, in the host's PID numbering, when it leads its own process
// group: the task the init has just forked. It reads every thread's
// children (the init forks from whichever thread runs it). ok is false
// when there is not exactly one such child (it already exited, say).
func initChild(initPid int) (procfs.Identity, bool) {
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(initPid), "task"))
	if err != nil {
		return procfs.Identity{}, false
	}
	var kids []int
	for _, t := range tasks {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(initPid), "task", t.Name(), "children"))
		if err != nil {
			continue
		}
		for f := range strings.FieldsSeq(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				kids = append(kids, pid)
			}
		}
	}
	if len(kids) != 1 {
		return procfs.Identity{}, false
	}
	s, err := procfs.ReadStat(kids[0])
	if err != nil || s.Ppid != initPid || s.Pgrp != kids[0] || !s.Alive() {
		return procfs.Identity{}, false
	}
	return procfs.Identity{Pid: kids[0], StartTicks: s.StartTicks}, true
}

// signalGroup sends sig to an isolated task's own process group when its
// handle names one and its leader is still the process named, leads its
// group and is the child of the handle's init (one read of its stat, after
// it is opened as a pidfd: procfs.SignalGroupIf); it reports false when
// the caller is to signal through the init instead.
func (p *Process) signalGroup(sig syscall.Signal) bool {
	g, init := p.state.Group, p.state.Task.Pid
	if g.Pid <= 0 || sig == syscall.SIGKILL {
		return false
	}
	return procfs.SignalGroupIf(g.Pid, func(s *procfs.Stat) bool {
		return g.Is(s) && s.Pgrp == g.Pid && s.Ppid == init
	}, sig) == nil
}
