package procfs

import (
	"errors"
	"fmt"
	"syscall"
)

// errESRCH is what reading /proc of a process that exits mid-read returns.
var errESRCH = syscall.ESRCH

// Identity names one process for its whole life: PID plus start time.
type Identity struct {
	Pid        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
}

// Self returns the identity of a running process by PID.
func Self(pid int) (Identity, error) {
	s, err := ReadStat(pid)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Pid: pid, StartTicks: s.StartTicks}, nil
}

// Alive reports whether the process is running and is the same process:
// a PID now held by a process with another start time is not.
func (id Identity) Alive() (bool, error) {
	s, err := ReadStat(id.Pid)
	if errors.Is(err, ErrNoProcess) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return s.StartTicks == id.StartTicks && s.Alive(), nil
}

// SignalGroup sends sig to the process group this process leads, after
// checking that the process is still the one identified (SignalGroupIf:
// through a pidfd where the kernel can signal a group that way). It
// returns ErrNoProcess when the process has exited or its PID was reused.
func (id Identity) SignalGroup(sig syscall.Signal) error {
	return SignalGroupIf(id.Pid, id.Is, sig)
}

// Is reports whether s is this process's stat while it runs: the same
// start time, and not a zombie.
func (id Identity) Is(s *Stat) bool { return s.StartTicks == id.StartTicks && s.Alive() }

// Group lists the live processes whose process group is pgid.
func Group(pgid int) ([]*Stat, error) {
	pids, err := Pids()
	if err != nil {
		return nil, err
	}
	var out []*Stat
	for _, pid := range pids {
		s, err := ReadStat(pid)
		if err != nil {
			continue // exited while we looked
		}
		if s.Pgrp == pgid && s.Alive() {
			out = append(out, s)
		}
	}
	return out, nil
}

// Signal sends sig to this one process after checking it is still the
// one identified; ErrNoProcess when it is gone.
func (id Identity) Signal(sig syscall.Signal) error {
	alive, err := id.Alive()
	if err != nil {
		return err
	}
	if !alive {
		return fmt.Errorf("pid %d: %w", id.Pid, ErrNoProcess)
	}
	if err := syscall.Kill(id.Pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("pid %d: %w", id.Pid, ErrNoProcess)
		}
		return fmt.Errorf("signal pid %d: %w", id.Pid, err)
	}
	return nil
}
