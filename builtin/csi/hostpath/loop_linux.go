package hostpath

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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

const loopMajor = 7

// loopTag names who attached a loop device (a node plugin, and what for).
// It is stored as the device's lo_file_name, a label the kernel keeps for
// LOOP_GET_STATUS64 and uses for nothing else (tools read the backing file's
// path from sysfs), so a plugin finds its own devices again after a crash and
// never takes another node plugin's device for the same image.
func loopTag(nodeID, purpose string) string {
	sum := sha256.Sum256([]byte(nodeID + "\x00" + purpose))
	return "berth-hostpath:" + hex.EncodeToString(sum[:16])
}

// attachLoop binds image to a free loop device, tagged with tag, and returns
// its path. A read-only device refuses writes in the kernel, whatever the
// opener asks.
func attachLoop(image string, readOnly bool, tag string) (string, error) {
	mode := os.O_RDWR
	if readOnly {
		mode = os.O_RDONLY
	}
	backing, err := os.OpenFile(image, mode, 0)
	if err != nil {
		return "", err
	}
	defer backing.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errNoLoopDevices, err)
	}
	defer ctl.Close()

	// Another process may take the free device between asking and
	// configuring it; then ask again.
	for range 32 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("%w: LOOP_CTL_GET_FREE: %v", errNoLoopDevices, err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		if err := ensureLoopNode(dev, n); err != nil {
			return "", err
		}
		err = configureLoop(dev, backing, readOnly, tag)
		if errors.Is(err, unix.EBUSY) {
			continue
		}
		if err != nil {
			return "", err
		}
		return dev, nil
	}
	return "", fmt.Errorf("attach %s: every free loop device was taken concurrently", image)
}

// ensureLoopNode creates /dev/loopN when devtmpfs does not (containers).
func ensureLoopNode(dev string, n int) error {
	if _, err := os.Stat(dev); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	err := unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(loopMajor, uint32(n))))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return &fs.PathError{Op: "mknod", Path: dev, Err: err}
	}
	return nil
}

func configureLoop(dev string, backing *os.File, readOnly bool, tag string) error {
	lf, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer lf.Close()
	var info unix.LoopInfo64
	if readOnly {
		info.Flags = unix.LO_FLAGS_READ_ONLY
	}
	copy(info.File_name[:len(info.File_name)-1], tag)
	cfg := unix.LoopConfig{Fd: uint32(backing.Fd()), Info: info}
	err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
	if err == nil || errors.Is(err, unix.EBUSY) {
		return err
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTTY) {
		return &fs.PathError{Op: "LOOP_CONFIGURE", Path: dev, Err: err}
	}
	// Kernels before 5.8 have no LOOP_CONFIGURE: bind, then describe. The
	// backing file's open mode makes the device read-only.
	if err := unix.IoctlSetInt(int(lf.Fd()), unix.LOOP_SET_FD, int(backing.Fd())); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return err
		}
		return &fs.PathError{Op: "LOOP_SET_FD", Path: dev, Err: err}
	}
	info.Flags = 0
	if err := unix.IoctlLoopSetStatus64(int(lf.Fd()), &info); err != nil {
		_ = unix.IoctlSetInt(int(lf.Fd()), unix.LOOP_CLR_FD, 0)
		return &fs.PathError{Op: "LOOP_SET_STATUS64", Path: dev, Err: err}
	}
	return nil
}

// loopBacks reports whether dev is a loop device bound to image with the
// given read-only setting and tag.
func loopBacks(dev, image string, readOnly bool, tag string) bool {
	if !strings.HasPrefix(dev, "/dev/loop") {
		return false
	}
	var st unix.Stat_t
	if err := unix.Stat(image, &st); err != nil {
		return false
	}
	f, err := os.Open(dev)
	if err != nil {
		return false
	}
	defer f.Close()
	info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
	if err != nil {
		return false
	}
	ro := info.Flags&unix.LO_FLAGS_READ_ONLY != 0
	n := bytes.IndexByte(info.File_name[:], 0)
	if n < 0 {
		n = len(info.File_name)
	}
	return info.Inode == st.Ino && info.Device == uint64(st.Dev) && ro == readOnly && string(info.File_name[:n]) == tag
}

// findLoop looks for a loop device already bound to image, such as one a
// crash left behind between attaching it and recording it.
func findLoop(image string, readOnly bool, tag string) (string, bool) {
	entries, err := filepath.Glob("/sys/block/loop*")
	if err != nil {
		return "", false
	}
	for _, e := range entries {
		dev := "/dev/" + filepath.Base(e)
		if loopBacks(dev, image, readOnly, tag) {
			return dev, true
		}
	}
	return "", false
}

// detachLoop unbinds a loop device. The kernel defers the unbind while
// someone still holds the device open.
func detachLoop(dev string) error {
	f, err := os.Open(dev)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
	if err != nil && !errors.Is(err, unix.ENXIO) {
		return &fs.PathError{Op: "LOOP_CLR_FD", Path: dev, Err: err}
	}
	return nil
}

// refreshLoopCapacity makes a loop device pick up its image's new size and
// returns the device's size in bytes.
func refreshLoopCapacity(dev string) (int64, error) {
	f, err := os.Open(dev)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_SET_CAPACITY, 0); err != nil {
		return 0, &fs.PathError{Op: "LOOP_SET_CAPACITY", Path: dev, Err: err}
	}
	return f.Seek(0, io.SeekEnd)
}

// loopAvailable reports whether this host can attach loop devices.
func loopAvailable() error {
	f, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", errNoLoopDevices, err)
	}
	return f.Close()
}
