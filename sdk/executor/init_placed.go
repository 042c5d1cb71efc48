package executor

import (
	"bufio"
	"encoding/json"
	"os"
	"strconv"
)

// The init builds the task's root while the executor puts it in the
// task's cgroups, and forks the task only once told it is in them (a byte
// on its fd 5). Before, the executor wrote the cgroups first and sent the
// spec after, so the init's set-up waited for them. Moving a process into
// a cgroup v1 hierarchy takes the kernel's cgroup_threadgroup_rwsem for
// writing, which waits for an RCU grace period: measured here at load 25
// on 2 cores, p50 13.6 ms, p90 39 ms for one cgroup.procs write, 10 ms
// for the four an exec task's init joins back to back. The root's
// mounts, pivot_root and capabilities take about as long, so the two now
// overlap on every start. The task still runs only in its cgroups: the
// init forks it after the byte, and an init that gets EOF instead (the
// executor failed to place it, or died) reports a failure and exits
// without forking.

// notPlacedDetail is the init's failure when it was not told it is in
// the task's cgroups.
const notPlacedDetail = "the executor did not place the namespace init in the task's cgroups"

// place writes initPid to each cgroup.procs file of procs and then tells
// the init on placedW, which it closes. A write that fails ends the
// init's wait with EOF; the init's own failure (it may have failed its
// set-up and exited, which fails the write) is returned when status, the
// init's status stream, has one, the failed write otherwise.
func place(initPid int, procs []string, placedW *os.File, status *bufio.Reader) *StartError {
	defer placedW.Close()
	for _, p := range procs {
		if err := os.WriteFile(p, []byte(strconv.Itoa(initPid)), 0); err != nil {
			placedW.Close()
			if f := initFailure(status); f != nil {
				return f
			}
			return &StartError{Kind: StartOther, Path: p, Detail: "join cgroup: " + detail(err)}
		}
	}
	if _, err := placedW.Write([]byte{1}); err != nil {
		if f := initFailure(status); f != nil {
			return f
		}
		return otherFailure("", err)
	}
	return nil
}

// initFailure reads the init's first status line, once it can no longer
// be told it was placed; it returns the failure the line reports unless
// that is only the init's not having been placed, nil otherwise.
func initFailure(status *bufio.Reader) *StartError {
	line, err := status.ReadBytes('\n')
	if err != nil {
		return nil
	}
	var st initStatus
	if json.Unmarshal(line, &st) != nil || st.Failure == nil || st.Failure.Detail == notPlacedDetail {
		return nil
	}
	return st.Failure
}

// awaitPlaced is the init's wait, before it forks the task, for the
// executor's word that it is in the task's cgroups.
func awaitPlaced() *StartError {
	f := os.NewFile(5, "placed")
	defer f.Close()
	var b [1]byte
	if n, _ := f.Read(b[:]); n == 1 {
		return nil
	}
	return &StartError{Kind: StartOther, Detail: notPlacedDetail}
}
