package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/logrotate"
	"berth.dev/berth/sdk/procfs"
)

// markerEnv is set in an executor's environment; its value is the protocol
// version between driver and executor.
const (
	markerEnv   = "BERTH_EXECUTOR"
	markerValue = "1"
)

// Files in a state directory.
const (
	exitFile     = "exit.json"
	stateFile    = "executor.json"
	executorLog  = "executor.log"
	maxSpecBytes = 8 << 20
)

// Spec is what an executor runs.
type Spec struct {
	// Path is the absolute path of the program. For an isolated task it
	// is resolved inside the task's root, a name without a slash in the
	// task's PATH (LookPath).
	Path string `json:"path"`
	// Args is argv; Args[0] is what the program sees as its name.
	Args []string `json:"args"`
	// Env is the task's whole environment.
	Env []string `json:"env"`
	// Dir is the working directory (inside the task's root when it is
	// isolated; "/" if empty).
	Dir string `json:"dir"`
	// Credential, when set, is the user the task runs as.
	Credential *Credential `json:"credential,omitempty"`
	// Stdout and Stderr are where the task's output streams go.
	Stdout logrotate.Config `json:"stdout"`
	Stderr logrotate.Config `json:"stderr"`
	// StateDir holds exit.json, executor.json and executor.log. One
	// directory per task; the executor must be able to write it.
	StateDir string `json:"state_dir"`
	// Isolation, when set, runs the task in namespaces of its own under a
	// root of its own (see Isolation).
	Isolation *Isolation `json:"isolation,omitempty"`
	// ExecutorLog is set by Standby.Start, never by a caller (Start and
	// Standby.Start refuse a spec with it set): where the standby
	// executor's own output goes once it has its spec (Start gives it at
	// exec). It is StateDir's executor.log.
	ExecutorLog string `json:"executor_log,omitempty"`
}

// Credential is a numeric user and groups.
type Credential struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
}

// State is what a driver persists (in its task handle) to find a task's
// executor again.
type State struct {
	Executor procfs.Identity `json:"executor"`
	Task     procfs.Identity `json:"task"`
	StateDir string          `json:"state_dir"`
	// Group is an isolated task's own process (in the host's numbering),
	// the leader of its process group, when the executor found it; Task
	// is then its namespace init. Signals other than SIGKILL go to
	// Group's process group directly (signal_direct.go).
	Group procfs.Identity `json:"group,omitzero"`
}

// Exit is how a task ended, as the executor records it in exit.json.
type Exit struct {
	// ExitCode is the exit status; 128+signal when killed by a signal.
	ExitCode int `json:"exit_code"`
	// Signal is the signal that killed the task, or 0.
	Signal int `json:"signal"`
	// Err is set when the executor could not run the task to completion.
	Err string `json:"err,omitempty"`
	// FinishedAt is unix nanoseconds.
	FinishedAt int64 `json:"finished_at"`
}

// Result converts e to the protocol's ExitResult.
func (e *Exit) Result() *driverpb.ExitResult {
	return &driverpb.ExitResult{
		ExitCode:   int32(e.ExitCode),
		Signal:     int32(e.Signal),
		Err:        e.Err,
		FinishedAt: e.FinishedAt,
	}
}

// exitFromWait converts a wait status.
func exitFromWait(ws syscall.WaitStatus) Exit {
	if ws.Signaled() {
		return Exit{ExitCode: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
	}
	return Exit{ExitCode: ws.ExitStatus()}
}

// readJSON decodes a small JSON file; a missing file is os.ErrNotExist.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeJSONAtomic writes v so that readers see the old file or the whole
// new one, never a torn write. It does not fsync: the files matter across
// a plugin crash, which the page cache survives, not across a node crash,
// which the task does not survive either (and an fsync costs up to
// hundreds of milliseconds on a busy disk, on every task start and exit).
func writeJSONAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// readExit returns the recorded exit, or (nil, nil) if there is none yet.
func readExit(stateDir string) (*Exit, error) {
	var e Exit
	err := readJSON(filepath.Join(stateDir, exitFile), &e)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &e, nil
}
