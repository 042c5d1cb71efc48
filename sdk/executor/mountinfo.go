package executor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountEntry is one line of /proc/self/mountinfo (see proc(5)).
type mountEntry struct {
	point  string
	shared bool
}

// readMountinfo lists the mounts of this process's mount namespace, in the
// kernel's order (a mount after the mounts it covers).
func readMountinfo() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			return nil, fmt.Errorf("mountinfo: short line %q", sc.Text())
		}
		e := mountEntry{point: unescapeMountinfo(fields[4])}
		// Optional fields run from the seventh up to a lone "-".
		for _, opt := range fields[6:] {
			if opt == "-" {
				break
			}
			if strings.HasPrefix(opt, "shared:") {
				e.shared = true
			}
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// MountPoints returns the mount points of this process's mount namespace,
// in the kernel's order, as /proc/self/mountinfo names them: resolved
// paths, unescaped.
func MountPoints() ([]string, error) {
	mounts, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(mounts))
	for i, m := range mounts {
		out[i] = m.point
	}
	return out, nil
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// EnsureShared makes the host directory dir a shared mount point, which a
// Bind with PropagationShared or PropagationSlave needs: propagation
// happens between the peers of a mount, so the task's bind must be a peer
// (or slave) of a mount on the host at exactly dir. A dir that is not a
// mount point is bind-mounted onto itself first (created is then true, and
// ReleaseShared undoes it); one that is a mount point but private is made
// shared. dir is resolved through symlinks first; the resolved path is
// returned, and is what Bind.Source must name.
func EnsureShared(dir string) (resolved string, created bool, err error) {
	if strings.ContainsRune(dir, 0) {
		return "", false, fmt.Errorf("mount source %q contains NUL", dir)
	}
	resolved, err = filepath.EvalSymlinks(dir)
	if err != nil {
		return "", false, fmt.Errorf("mount source: %w", err)
	}
	mounts, err := readMountinfo()
	if err != nil {
		return "", false, err
	}
	// The last entry for a path is the mount on top, the one a lookup sees.
	top, isMount := mountEntry{}, false
	for _, m := range mounts {
		if m.point == resolved {
			top, isMount = m, true
		}
	}
	if isMount && top.shared {
		return resolved, false, nil
	}
	if !isMount {
		if err := unix.Mount(resolved, resolved, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return "", false, fmt.Errorf("bind mount source %s onto itself: %w", resolved, err)
		}
		created = true
	}
	if err := unix.Mount("", resolved, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		if created {
			unix.Unmount(resolved, unix.MNT_DETACH)
		}
		return "", false, fmt.Errorf("make mount source %s shared: %w", resolved, err)
	}
	return resolved, created, nil
}

// ReleaseShared removes the bind EnsureShared created at dir, unless it is
// in use: a mount below it (one a task made, which the host may rely on)
// or a process inside it keeps it, and ReleaseShared then reports false
// with no error. It never detaches lazily, so it cannot take a mount away
// from under anyone.
func ReleaseShared(dir string) (bool, error) {
	err := unix.Unmount(dir, 0)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EBUSY):
		return false, nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		return false, nil // no longer a mount point, or gone
	}
	return false, fmt.Errorf("unmount %s: %w", dir, err)
}
