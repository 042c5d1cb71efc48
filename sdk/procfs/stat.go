package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/sdk/internal/sdkerr"
)

// ErrNoProcess is returned by ReadStat when no process has the PID.
var ErrNoProcess = sdkerr.New(codes.NotFound, "NO_PROCESS", "no such process")

// ErrBadStat is returned by ParseStat when the input is not a
// /proc/PID/stat line. It is Internal: a line berth cannot parse is berth's
// bug (or a kernel it does not know), not the caller's.
var ErrBadStat = sdkerr.New(codes.Internal, "BAD_PROC_STAT", "malformed /proc stat line")

// Stat is the part of /proc/PID/stat drivers use (see proc(5)).
type Stat struct {
	Pid   int
	Comm  string
	State byte
	Ppid  int
	Pgrp  int
	// UserTicks and SystemTicks are CPU time in clock ticks.
	UserTicks   uint64
	SystemTicks uint64
	// StartTicks is when the process started, in clock ticks since boot.
	StartTicks uint64
	// RSSPages is the resident set size in pages.
	RSSPages int64
}

// Alive reports whether the process is still running: a zombie (Z) or dead
// (X) process has exited even though its /proc entry remains.
func (s *Stat) Alive() bool { return s.State != 'Z' && s.State != 'X' }

// root is where procfs is mounted.
const root = "/proc"

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (*Stat, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	data, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, errESRCH) {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return ParseStat(data)
}

// ParseStat parses a /proc/PID/stat line. The command name may contain
// spaces and parentheses, so fields are counted from its last ')'.
func ParseStat(data []byte) (*Stat, error) {
	open := bytes.IndexByte(data, '(')
	closing := bytes.LastIndexByte(data, ')')
	if open <= 0 || closing < open {
		return nil, fmt.Errorf("%w: no (comm)", ErrBadStat)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(data[:open])))
	if err != nil {
		return nil, fmt.Errorf("%w: pid: %v", ErrBadStat, err)
	}
	// fields[0] is field 3 of proc(5) (state).
	fields := bytes.Fields(data[closing+1:])
	if len(fields) < 22 || len(fields[0]) != 1 {
		return nil, fmt.Errorf("%w: %d fields after comm, want at least 22", ErrBadStat, len(fields))
	}
	// A state is one letter (R, S, D, Z, T, t, X, I, ...).
	if st := fields[0][0]; !('A' <= st && st <= 'Z' || 'a' <= st && st <= 'z') {
		return nil, fmt.Errorf("%w: state %q is not a letter", ErrBadStat, st)
	}
	s := &Stat{Pid: pid, Comm: string(data[open+1 : closing]), State: fields[0][0]}
	ints := []struct {
		field int
		dst   *int
	}{{4, &s.Ppid}, {5, &s.Pgrp}}
	for _, f := range ints {
		if *f.dst, err = strconv.Atoi(string(fields[f.field-3])); err != nil {
			return nil, fmt.Errorf("%w: field %d: %v", ErrBadStat, f.field, err)
		}
	}
	uints := []struct {
		field int
		dst   *uint64
	}{{14, &s.UserTicks}, {15, &s.SystemTicks}, {22, &s.StartTicks}}
	for _, f := range uints {
		if *f.dst, err = strconv.ParseUint(string(fields[f.field-3]), 10, 64); err != nil {
			return nil, fmt.Errorf("%w: field %d: %v", ErrBadStat, f.field, err)
		}
	}
	if s.RSSPages, err = strconv.ParseInt(string(fields[24-3]), 10, 64); err != nil {
		return nil, fmt.Errorf("%w: field 24: %v", ErrBadStat, err)
	}
	return s, nil
}

// Pids lists the PIDs in /proc.
func Pids() ([]int, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
