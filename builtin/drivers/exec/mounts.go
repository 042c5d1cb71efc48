package execdriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
)

// sharedRecordFile, in a task's state directory, lists the host
// directories the task's start bind-mounted onto themselves to make them
// shared (executor.EnsureShared), for Release to undo.
const sharedRecordFile = "shared-mounts.json"

// sharedMu serializes making host paths shared and releasing them: two
// starts must not both bind one directory onto itself, and a release must
// not remove a bind that a start has just decided to use (the starting
// task is in the driver's task list before it gets here, so a release
// that runs after sees it).
var sharedMu sync.Mutex

// propagation maps the protocol's propagation to the executor's.
func propagation(p driverpb.MountPropagation) executor.Propagation {
	switch p {
	case driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK:
		return executor.PropagationSlave
	case driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL:
		return executor.PropagationShared
	}
	return executor.PropagationPrivate
}

// taskBinds turns the task's mounts into binds, making the host side of
// every propagating mount a shared mount point first (recorded in
// stateDir when berth had to create it). A host path that does not exist
// is a StartError: the job may be right and this node wrong.
func taskBinds(cfg *driverpb.TaskConfig, stateDir string) ([]executor.Bind, error) {
	var binds []executor.Bind
	var created []string
	for i, m := range cfg.GetMounts() {
		host, task := m.GetHostPath(), filepath.Clean(m.GetTaskPath())
		if strings.ContainsRune(host, 0) || strings.ContainsRune(task, 0) {
			return nil, &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopeTask, Key: fmt.Sprintf("mounts[%d]", i),
				Problem: fmt.Sprintf("mount at task path %q: a path contains a NUL byte", m.GetTaskPath())}
		}
		if _, err := os.Stat(host); err != nil {
			return nil, &sdk.StartError{Reason: sdk.StartNotFound, Path: host,
				Detail: fmt.Sprintf("host path of the mount at %s: %v", task, errors.Unwrap(err))}
		}
		prop := propagation(m.GetPropagation())
		if prop != executor.PropagationPrivate {
			sharedMu.Lock()
			resolved, made, err := executor.EnsureShared(host)
			sharedMu.Unlock()
			if err != nil {
				return nil, &sdk.StartError{Reason: sdk.StartOther, Path: host, Detail: err.Error()}
			}
			host = resolved
			if made {
				created = append(created, resolved)
				if err := writeShared(stateDir, created); err != nil {
					return nil, err
				}
			}
		}
		binds = append(binds, executor.Bind{Source: host, Target: task, ReadOnly: m.GetReadOnly(), Propagation: prop})
	}
	return binds, nil
}

func writeShared(stateDir string, dirs []string) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	data, _ := json.Marshal(dirs)
	return os.WriteFile(filepath.Join(stateDir, sharedRecordFile), data, 0o600)
}

// rewriteShared records dirs as the shared binds still to remove (none:
// no record).
func rewriteShared(stateDir string, dirs []string) error {
	if len(dirs) == 0 {
		err := os.Remove(filepath.Join(stateDir, sharedRecordFile))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	return writeShared(stateDir, dirs)
}

func readShared(stateDir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, sharedRecordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var dirs []string
	if err := json.Unmarshal(data, &dirs); err != nil {
		return nil, fmt.Errorf("%s: %w", sharedRecordFile, err)
	}
	return dirs, nil
}

// propagatingSources are the resolved host paths of the propagating
// mounts of cfg.
func propagatingSources(cfg *driverpb.TaskConfig) map[string]bool {
	out := map[string]bool{}
	for _, m := range cfg.GetMounts() {
		if propagation(m.GetPropagation()) == executor.PropagationPrivate {
			continue
		}
		if p, err := filepath.EvalSymlinks(m.GetHostPath()); err == nil {
			out[p] = true
		}
	}
	return out
}
