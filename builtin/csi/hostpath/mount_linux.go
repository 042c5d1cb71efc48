package hostpath

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// bindMount bind-mounts src at target and then applies flags with a
// remount, since the kernel ignores per-mount flags on the initial bind.
// Flags the target's filesystem is locked to (nosuid, nodev, noexec in a
// restricted namespace) are carried over so the remount is allowed.
func bindMount(src, target string, flags mountFlags) error {
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return &fs.PathError{Op: "bind mount " + src + " at", Path: target, Err: err}
	}
	if flags == (mountFlags{}) {
		return nil
	}
	ms := uintptr(unix.MS_BIND | unix.MS_REMOUNT)
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err == nil {
		for _, m := range [][2]int64{
			{unix.ST_NOSUID, unix.MS_NOSUID},
			{unix.ST_NODEV, unix.MS_NODEV},
			{unix.ST_NOEXEC, unix.MS_NOEXEC},
		} {
			if st.Flags&m[0] != 0 {
				ms |= uintptr(m[1])
			}
		}
	}
	for _, f := range []struct {
		on bool
		ms uintptr
	}{
		{flags.readOnly, unix.MS_RDONLY},
		{flags.noSuid, unix.MS_NOSUID},
		{flags.noDev, unix.MS_NODEV},
		{flags.noExec, unix.MS_NOEXEC},
		{flags.noAtime, unix.MS_NOATIME},
		{flags.noDirAtime, unix.MS_NODIRATIME},
		{flags.relAtime, unix.MS_RELATIME},
		{flags.strictAtime, unix.MS_STRICTATIME},
	} {
		if f.on {
			ms |= f.ms
		}
	}
	if err := unix.Mount("", target, "", ms, ""); err != nil {
		// Leave nothing half-done: a writable mount where read-only was
		// asked for is worse than no mount.
		_ = unix.Unmount(target, 0)
		return &fs.PathError{Op: "remount with flags", Path: target, Err: err}
	}
	return nil
}

// unmountAll removes every mount stacked at target. A path that is not a
// mount point is fine. The kernel says which it is: umount(2) fails with
// EINVAL on a path that is not a mount point (ENOENT on none), so the
// loop ends there without reading the mount table, which took as long as
// the unmount itself twice over on the stop path (issue 26).
func unmountAll(target string) error {
	for range 16 {
		if err := unix.Unmount(target, 0); err != nil {
			switch {
			case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
				return nil
			case errors.Is(err, unix.EBUSY):
				return fmt.Errorf("unmount %s: %w", target, errBusy)
			}
			return &fs.PathError{Op: "unmount", Path: target, Err: err}
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 16 unmounts", target)
}

// isMountPoint reports whether path is a mount point, from
// /proc/self/mountinfo (bind mounts within one filesystem share st_dev, so
// comparing devices is not enough).
func isMountPoint(path string) (bool, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	points, err := parseMountInfo(f)
	if err != nil {
		return false, err
	}
	for _, p := range points {
		if p == resolved {
			return true, nil
		}
	}
	return false, nil
}

// parseMountInfo returns the mount points listed in a mountinfo file
// (proc(5)): the fifth field of each line, with octal escapes undone.
func parseMountInfo(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		fields := bytes.Fields(sc.Bytes())
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 10 {
			return nil, fmt.Errorf("mountinfo line %d: %d fields, want at least 10", line, len(fields))
		}
		out = append(out, unescapeMountPath(string(fields[4])))
	}
	return out, sc.Err()
}

// unescapeMountPath undoes the kernel's \ooo escaping of space, tab, newline
// and backslash in mountinfo paths.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
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

// sameInode reports whether a and b are the same file (after following
// symlinks): a bind mount's target shows the inode of its source.
func sameInode(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Stat(a, &sa) != nil || unix.Stat(b, &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// mountedFrom reports whether target is a mount point showing src.
func mountedFrom(target, src string) bool {
	mounted, err := isMountPoint(target)
	return err == nil && mounted && sameInode(target, src)
}

// deviceMountedAt reports whether target is a mount point showing the block
// device dev.
func deviceMountedAt(target, dev string) bool {
	mounted, err := isMountPoint(target)
	if err != nil || !mounted {
		return false
	}
	var st, sd unix.Stat_t
	if unix.Stat(target, &st) != nil || unix.Stat(dev, &sd) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFBLK && st.Rdev == sd.Rdev
}

// fsStats reports the filesystem holding path: total and available bytes,
// free inodes and whether it is mounted read-only.
type fsStats struct {
	totalBytes, availBytes  int64
	totalInodes, freeInodes int64
	readOnly                bool
}

func statFS(path string) (fsStats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fsStats{}, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	bs := int64(st.Bsize)
	return fsStats{
		totalBytes:  int64(st.Blocks) * bs,
		availBytes:  int64(st.Bavail) * bs,
		totalInodes: int64(st.Files),
		freeInodes:  int64(st.Ffree),
		readOnly:    st.Flags&unix.ST_RDONLY != 0,
	}, nil
}
