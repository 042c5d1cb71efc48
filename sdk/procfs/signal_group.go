package procfs

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// SignalGroupIf sends sig to the process group that process pid leads, when
// check accepts the process's stat; it returns ErrNoProcess when the
// process is gone or check refuses it. Where the kernel has it (Linux 6.9:
// pidfd_send_signal with PIDFD_SIGNAL_PROCESS_GROUP), the process is
// opened as a pidfd before its stat is read, and the signal goes through
// that pidfd: a process that exits and whose PID is taken by another after
// the check cannot receive it, nor can a group that took the number. On an
// older kernel the signal goes to kill(-pid), which leaves that narrow race
// between the check and the kill.
func SignalGroupIf(pid int, check func(*Stat) bool, sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		defer unix.Close(fd)
	case errors.Is(err, syscall.ESRCH):
		return fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	default:
		// ENOSYS (before Linux 5.3), or EINVAL: pid is not a process
		// (a thread) and the check below refuses it.
		fd = -1
	}
	s, err := ReadStat(pid)
	if errors.Is(err, ErrNoProcess) || (err == nil && !check(s)) {
		return fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	if err != nil {
		return err
	}
	if fd >= 0 {
		err := pidfdSignalGroup(fd, sig)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.ESRCH):
			return fmt.Errorf("process group %d: %w", pid, ErrNoProcess)
		case !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOSYS):
			return fmt.Errorf("signal process group %d: %w", pid, err)
		}
		// A kernel without PIDFD_SIGNAL_PROCESS_GROUP: kill(-pid).
	}
	if err := syscall.Kill(-pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("process group %d: %w", pid, ErrNoProcess)
		}
		return fmt.Errorf("signal process group %d: %w", pid, err)
	}
	return nil
}

// pidfdSignalGroup is pidfd_send_signal to the group of the pidfd's
// process; a variable so a test can take the kill(-pid) path.
var pidfdSignalGroup = func(fd int, sig syscall.Signal) error {
	return unix.PidfdSendSignal(fd, sig, nil, unix.PIDFD_SIGNAL_PROCESS_GROUP)
}
