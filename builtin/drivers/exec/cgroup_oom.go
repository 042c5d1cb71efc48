package execdriver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// oomKills reads the number of OOM kills in the task's cgroup, and only
// that: one file (v2 memory.events, v1 memory.oom_control; the ones
// stat's library reads it from), not every controller's statistics. It is
// on the path of a task's exit report — WaitTask answers once it is read
// — so the full stat's milliseconds (the library re-reading the mount
// table, then each controller's files) would delay every stop.
func (c *cgroupDriver) oomKills(taskID string) (uint64, error) {
	return c.oomKillsAt(taskGroup(taskID))
}

// oomKillsAt is oomKills of the cgroup group.
func (c *cgroupDriver) oomKillsAt(group string) (uint64, error) {
	if c == nil {
		return 0, errNoCgroup
	}
	var path string
	switch {
	case c.v2 != "":
		path = filepath.Join(c.v2, group, "memory.events")
	case c.v1Memory != nil:
		path = filepath.Join(c.v1Memory.Path(group), "memory.oom_control")
	default:
		return 0, errNoCgroup
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, errNoCgroup
	}
	if err != nil {
		return 0, fmt.Errorf("read cgroup %s: %w", group, err)
	}
	return parseOOMKill(data)
}

// parseOOMKill returns the "oom_kill" key's value of a flat-keyed cgroup
// file; a kernel too old to count kills there has none, which is 0 (as
// the library reads it).
func parseOOMKill(data []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, value, ok := bytes.Cut(sc.Bytes(), []byte{' '})
		if !ok || string(key) != "oom_kill" {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cgroup oom_kill %q: %w", value, err)
		}
		return n, nil
	}
	return 0, sc.Err()
}
