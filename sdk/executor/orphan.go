package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	hclog "github.com/hashicorp/go-hclog"
)

// FindOrphans returns the state directories, ending in tail (for example
// "raw_exec/<task id>"), of the executors that run on this host: a
// driver that has only a task's ID, and not the config its state
// directory derives from (one its previous process died starting), finds
// the task's executor this way. An executor's stdout is the executor.log
// of its state directory for its whole life, so /proc names it. Processes
// this one may not inspect are skipped.
func FindOrphans(tail string) ([]string, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("executor: find %q: %w", tail, err)
	}
	suffix := string(filepath.Separator) + filepath.Join(filepath.Clean(tail), executorLog)
	var dirs []string
	seen := map[string]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		link, err := os.Readlink(filepath.Join("/proc", e.Name(), "fd", "1"))
		if err != nil || len(link) <= len(suffix) || link[len(link)-len(suffix):] != suffix {
			continue
		}
		dir := filepath.Dir(link)
		if !seen[dir] {
			seen[dir] = true
			dirs = append(dirs, dir)
		}
	}
	return dirs, nil
}

// KillOrphan kills the executor recorded in stateDir's executor.json, and
// its task's process group, if that executor still lives (its recorded
// start time tells it from a process that reuses its pid), and reports
// whether it did. A state directory without executor.json is an executor
// that has not started its task yet: an error says so.
func KillOrphan(stateDir string, logger hclog.Logger) (bool, error) {
	var st State
	err := readJSON(filepath.Join(stateDir, stateFile), &st)
	if errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("executor: %s: its executor has not started its task yet", stateDir)
	}
	if err != nil {
		return false, fmt.Errorf("executor: %w", err)
	}
	alive, err := st.Executor.Alive()
	if err != nil || !alive {
		return false, err
	}
	if logger != nil {
		logger.Warn("killing the executor of a task no driver process knows", "state_dir", stateDir,
			"executor_pid", st.Executor.Pid, "task_pid", st.Task.Pid)
	}
	st.Task.SignalGroup(syscall.SIGKILL)
	if err := st.Executor.Signal(syscall.SIGKILL); err != nil {
		return false, fmt.Errorf("executor: kill %d: %w", st.Executor.Pid, err)
	}
	return true, nil
}
