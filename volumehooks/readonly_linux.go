package volumehooks

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"berth.dev/berth/sdk/executor"
)

// bindReadOnly bind-mounts src at target, read-only. The kernel ignores
// MS_RDONLY on the first bind, so it is a bind then a remount; the flags
// the source is locked to (nosuid, nodev, noexec) are carried over, or
// the remount is refused. Not recursive: a mount under the publish target
// would stay writable, so it is not shown at all. A remount that fails
// leaves no mount behind: a writable mount where read-only was asked for
// is worse than none.
func bindReadOnly(src, target string) error {
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return &fs.PathError{Op: "bind mount " + src + " at", Path: target, Err: err}
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err == nil {
		for _, m := range [][2]int64{{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC}} {
			if st.Flags&m[0] != 0 {
				flags |= uintptr(m[1])
			}
		}
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		_ = unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		return &fs.PathError{Op: "remount read-only", Path: target, Err: err}
	}
	if err := unix.Statfs(target, &st); err != nil || st.Flags&unix.ST_RDONLY == 0 {
		_ = unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		return &fs.PathError{Op: "check read-only", Path: target, Err: errors.Join(err, errors.New("the mount is writable after the read-only remount"))}
	}
	return nil
}

// unmountAll removes every mount stacked at target; a path that is not a
// mount point (or does not exist) is fine. A busy mount (a process of the
// task left with its working directory in it) is detached: the task is
// dead for good or about to start again, and the volume must not stay
// reachable through it.
func unmountAll(target string) error {
	for range 16 {
		err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
				return &fs.PathError{Op: "unmount (detach)", Path: target, Err: err}
			}
		default:
			return &fs.PathError{Op: "unmount", Path: target, Err: err}
		}
	}
	return fmt.Errorf("unmounting %s: still mounted after 16 unmounts", target)
}

// isMountPoint reports whether p is a mount point in the client's mount
// namespace. The mount table names resolved paths, so p is resolved first
// (a data dir reached through a symlink).
func isMountPoint(p string) (bool, error) {
	if resolved, err := filepath.EvalSymlinks(p); err == nil {
		p = resolved
	}
	points, err := executor.MountPoints()
	if err != nil {
		return false, err
	}
	return slices.Contains(points, p), nil
}
