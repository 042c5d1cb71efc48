package acceptance

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sdk/executor"
	"berth.dev/berth/sdk/procfs"
)

// killExecutors ends every task the agent cl started, whatever its
// driver (raw_exec or exec) and command: the executor of each task
// records its own identity and its task's (PID and start time) in
// executor.json in the task's state directory, <data_dir>/alloc/<alloc>/
// <task>/.<driver>/<id>/. Only a process that still has the recorded
// start time is signalled, so a PID reused since is left alone; each one
// found is logged. The
// task's process group goes first, then the executor; an exec task's
// namespace init dies with its executor (parent-death signal), and with it
// everything in the task's PID namespace. It waits (bounded) until those
// signalled are gone, so that what they had mounted can be unmounted.
func killExecutors(cl *agent) {
	var killed []procfs.Identity
	files, _ := filepath.Glob(filepath.Join(cl.dir, "data", "alloc", "*", "*", ".*", "*", "executor.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var st executor.State
		if json.Unmarshal(b, &st) != nil || st.Executor.Pid <= 1 {
			continue
		}
		if ok, err := st.Executor.Alive(); err == nil && ok {
			cl.t.Logf("killing leftover executor %d and task %d of %s", st.Executor.Pid, st.Task.Pid, filepath.Dir(f))
		}
		if st.Task.Pid > 1 {
			_ = st.Task.SignalGroup(syscall.SIGKILL)
			_ = st.Task.Signal(syscall.SIGKILL)
		}
		if st.Executor.Signal(syscall.SIGKILL) == nil {
			killed = append(killed, st.Executor)
		}
		if st.Task.Pid > 1 {
			killed = append(killed, st.Task)
		}
	}
	waitGone(killed)
}

// waitGone waits, at most five seconds, until none of procs runs.
func waitGone(procs []procfs.Identity) {
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range procs {
		for time.Now().Before(deadline) {
			if ok, err := p.Alive(); err != nil || !ok {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// killByExe ends the processes running the executable at path (a binary
// the test built into a directory of its own, so nothing else runs it),
// by PID, and waits (bounded) until they are gone.
func killByExe(t *testing.T, path string) {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	pids, err := procfs.Pids()
	if err != nil {
		t.Logf("listing processes: %v", err)
		return
	}
	var killed []procfs.Identity
	for _, pid := range pids {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || exe != path {
			continue
		}
		id, err := procfs.Self(pid)
		if err != nil {
			continue
		}
		t.Logf("killing leftover process %d (%s)", pid, path)
		if id.Signal(syscall.SIGKILL) == nil {
			killed = append(killed, id)
		}
	}
	waitGone(killed)
}

// stopConsumersThenPlugin is the cleanup of a test whose jobs use volumes
// of a plugin that runs as a job: the consumers are stopped first, then,
// once the volumes' claims and attachments are freed (at most 30 seconds:
// the node plugin must still be there to unpublish and unstage them, the
// controller to detach them), the plugin's job.
// A volume that does not exist has nothing to wait for.
func stopConsumersThenPlugin(t *testing.T, s *agent, consumers, vols []string, plugin string) {
	stopAllJobs(t, s, consumers...)
	deadline := time.Now().Add(30 * time.Second)
	for _, vol := range vols {
		for {
			v, err := s.volume(vol)
			if err != nil || len(v.Claims) == 0 && len(v.Attachments) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Logf("stopping %s with %s still claimed or attached: claims %+v, attachments %+v", plugin, vol, v.Claims, v.Attachments)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	stopAllJobs(t, s, plugin)
}
