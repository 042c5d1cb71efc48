package executor

import (
	"fmt"
	"os"
	"strconv"
)

// leaveTaskCgroups moves the init initPid, which has forked the task, to
// the cgroup.procs files procs (Isolation.InitCgroupProcs). A move that
// fails is noted in the executor's log and leaves the init where it is:
// it only costs the init's wake-ups their promptness.
func leaveTaskCgroups(initPid int, procs []string) {
	for _, p := range procs {
		if err := os.WriteFile(p, []byte(strconv.Itoa(initPid)), 0); err != nil {
			fmt.Fprintf(os.Stderr, "executor: moving the namespace init out of the task's cgroup to %s: %v\n", p, err)
		}
	}
}
