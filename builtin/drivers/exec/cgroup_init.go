package execdriver

import (
	"os"
	"path/filepath"

	"github.com/containerd/cgroups/v3/cgroup1"
)

// The namespace init leaves the task's CPU cgroup once it has forked the
// task (cgroup v1 only). It has to be in it at the fork, so the task and
// everything it forks are; after that its work is the driver's, not the
// task's: forwarding a signal, reaping the task, and its own exit, which
// tears down the task's mount namespace and ends the PID namespace. A
// member of a task's cgroup is scheduled as part of that group, and on a
// busy machine a group's wake-ups wait far longer than a process's in
// the plugin's cgroup (measured here at load 31 on 2 cores, a pipe
// round-trip: p99 16-21 ms in a cgroup, 0.19 ms in the root one). That
// wait sat on every stop's path from the task's exit to its volume's
// unpublish (csiflow's trace: the init's exiting thread, woken by RCU,
// waited 22 ms for the CPU once).
//
// The init stays in the task's other controllers: its memory is charged
// to the task and its processes are counted. On cgroup v2 the
// controllers are one hierarchy, and leaving the task's cgroup would take
// the init out of its memory limit too, so there it stays.

// initCgroupProcs returns the cgroup.procs files the executor moves the
// task's init to once the task is forked: the plugin's own CPU cgroup on
// a v1 host, none elsewhere or when it cannot be told.
func (c *cgroupDriver) initCgroupProcs() []string {
	if c == nil || c.v1CPUProcs == "" {
		return nil
	}
	return []string{c.v1CPUProcs}
}

// ownV1CPUProcs is the cgroup.procs file of this process's cgroup in the
// v1 CPU hierarchy, "" when there is none.
func ownV1CPUProcs(subs []cgroup1.Subsystem) string {
	own, err := cgroup1.PidPath(os.Getpid())(cgroup1.Cpu)
	if err != nil {
		return ""
	}
	for _, s := range subs {
		if p, ok := s.(interface{ Path(string) string }); ok && s.Name() == cgroup1.Cpu {
			procs := filepath.Join(p.Path(own), "cgroup.procs")
			if _, err := os.Stat(procs); err != nil {
				return ""
			}
			return procs
		}
	}
	return ""
}
