package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// setupRoot runs in the init's new mount namespace: it builds the task's
// root at iso.Root and pivot_roots into it.
func setupRoot(iso *Isolation) error {
	if err := isolateMounts(iso); err != nil {
		return err
	}
	root := iso.Root
	// The root must be a mount point for pivot_root, and private so that
	// nothing mounted below it (binds, /proc, /dev) reaches any peer.
	if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind root %s: %w", root, err)
	}
	if err := unix.Mount("", root, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make root %s private: %w", root, err)
	}
	for _, d := range []string{"proc", "dev"} {
		if err := mkdirUnder(root, "/"+d, 0o755); err != nil {
			return err
		}
	}
	if err := mkdirUnder(root, "/tmp", 0o1777); err != nil {
		return err
	}
	// mkdir applies the umask; /tmp must be world-writable and sticky.
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777|os.ModeSticky); err != nil {
		return err
	}
	for _, b := range iso.Binds {
		if err := bindInto(root, b); err != nil {
			return err
		}
	}
	proc := filepath.Join(root, "proc")
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := setupDev(root); err != nil {
		return err
	}
	for _, m := range iso.Masks {
		if err := mkdirUnder(root, m, 0o700); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", filepath.Join(root, m), "tmpfs",
			unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0500"); err != nil {
			return fmt.Errorf("mask %s: %w", m, err)
		}
	}
	if err := pivot(root); err != nil {
		return err
	}
	return hardenProc()
}

// isolateMounts stops this namespace's mounts from propagating to the
// host: each becomes a slave (it still receives the host's mount events,
// sends none). The sources of shared binds are left alone: a bind of them
// must stay a peer of the host's mount for events to go both ways, and
// EnsureShared made each a mount point of its own so that leaving it
// shared leaves nothing else shared. Mounts below such a source stay
// shared with it.
func isolateMounts(iso *Isolation) error {
	var keep []string
	for _, b := range iso.Binds {
		if b.Propagation == PropagationShared && b.Symlink == "" {
			keep = append(keep, b.Source)
		}
	}
	mounts, err := readMountinfo()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if !m.shared || underAny(m.point, keep) {
			continue
		}
		err := unix.Mount("", m.point, "", unix.MS_SLAVE, "")
		// A mount point that vanished or is covered by another is not one
		// a path can reach, so nothing can be mounted on it from here.
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("make %s a slave mount: %w", m.point, err)
		}
	}
	return nil
}

func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// mkdirUnder creates the task path p below root. No element may be a
// symlink: the task owns its root and could otherwise point a mount at a
// host directory.
func mkdirUnder(root, p string, mode os.FileMode) error {
	cur := root
	for _, elem := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		cur = filepath.Join(cur, elem)
		st, err := os.Lstat(cur)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.Mkdir(cur, mode); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
		case err != nil:
			return err
		case st.Mode()&os.ModeSymlink != 0:
			return fmt.Errorf("task path %s: %s is a symlink", p, cur)
		case !st.IsDir():
			return fmt.Errorf("task path %s: %s is not a directory", p, cur)
		}
	}
	return nil
}

// bindInto mounts b below root.
func bindInto(root string, b Bind) error {
	target := filepath.Join(root, b.Target)
	if b.Symlink != "" {
		if err := mkdirUnder(root, filepath.Dir(b.Target), 0o755); err != nil {
			return err
		}
		if cur, err := os.Readlink(target); err == nil && cur == b.Symlink {
			return nil // left by an earlier run in this task dir
		}
		if err := os.Symlink(b.Symlink, target); err != nil {
			return fmt.Errorf("symlink %s: %w", b.Target, err)
		}
		return nil
	}
	st, err := os.Stat(b.Source)
	if err != nil {
		return fmt.Errorf("mount source for %s: %w", b.Target, err)
	}
	if st.IsDir() {
		err = mkdirUnder(root, b.Target, 0o755)
	} else {
		err = touchUnder(root, b.Target)
	}
	if err != nil {
		return err
	}
	if err := unix.Mount(b.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", b.Source, b.Target, err)
	}
	if b.ReadOnly {
		if err := remountReadOnly(target); err != nil {
			return fmt.Errorf("make %s read-only: %w", b.Target, err)
		}
	}
	prop := uintptr(unix.MS_PRIVATE)
	switch b.Propagation {
	case PropagationSlave:
		prop = unix.MS_SLAVE
	case PropagationShared:
		prop = unix.MS_SHARED
	}
	if err := unix.Mount("", target, "", prop|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("set propagation of %s to %s: %w", b.Target, b.Propagation, err)
	}
	return nil
}

// touchUnder creates an empty file at task path p (a bind target for a
// file), its parents as directories.
func touchUnder(root, p string) error {
	if err := mkdirUnder(root, filepath.Dir(p), 0o755); err != nil {
		return err
	}
	target := filepath.Join(root, p)
	st, err := os.Lstat(target)
	if err == nil {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("task path %s exists and is not a regular file", p)
		}
		return nil
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// remountReadOnly makes the bind at target read-only, keeping the flags
// the kernel would otherwise refuse to drop (nosuid, nodev, noexec).
func remountReadOnly(target string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
	} {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	return unix.Mount("", target, "", flags, "")
}

// devices are the host device nodes a task gets in its /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// setupDev gives the task a small /dev of its own: a tmpfs with binds of
// a few host devices, a private devpts and a /dev/shm.
func setupDev(root string) error {
	dev := filepath.Join(root, "dev")
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=1m"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, d := range devices {
		host := "/dev/" + d
		if _, err := os.Stat(host); err != nil {
			continue // a host without it (no /dev/full in some sandboxes)
		}
		if err := touchUnder(root, "/dev/"+d); err != nil {
			return err
		}
		if err := unix.Mount(host, filepath.Join(dev, d), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", host, err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	if err := unix.Mount("shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
		"mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	for name, to := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd",
		"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(to, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// pivot makes root the namespace's "/" and drops the host's tree.
func pivot(root string) error {
	oldRoot, err := unix.Open("/", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the old root: %w", err)
	}
	defer unix.Close(oldRoot)
	if err := unix.Chdir(root); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root on the new one, so no
	// directory for it is needed in the task's root.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root into %s: %w", root, err)
	}
	// "." must name the old root from here on: a path walk from a working
	// directory in the new root would stop at the new root, and the
	// propagation change below would hit the task's own mounts.
	if err := unix.Fchdir(oldRoot); err != nil {
		return fmt.Errorf("enter the old root: %w", err)
	}
	// Unmounting the old tree must not propagate: below a shared bind's
	// source sit mounts the host shares, which a propagated unmount would
	// take from the host too.
	if err := unix.Mount("", ".", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make the old root a slave: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount the old root: %w", err)
	}
	return unix.Chdir("/")
}

// hardenProc makes the kernel's tunables read-only and hides the files
// that leak host state, as container runtimes do: the task's root user
// could otherwise change the host's sysctls.
func hardenProc() error {
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"} {
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("bind %s: %w", p, err)
		}
		if err := remountReadOnly(p); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"} {
		if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	return nil
}
