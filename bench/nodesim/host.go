package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
)

// The simulator's own costs. Thousands of nodes in one process are
// thousands of hosts on one disk, one heap and one open-files limit:
//
//   - the open files: every node holds a connection to each server it
//     has talked to, up to three when the servers are slow and its calls
//     fail over, which passes a 20,000 limit at 10,000 nodes; the
//     simulator raises its limit (and so the servers' it starts) when it
//     may, and splits the nodes over node processes of its own binary
//     when the limit would still not hold them (split.go);
//   - -shm puts the nodes' data dirs (node ID file, the alloc and task
//     dirs the real alloc runners build) on /dev/shm, and -gc-percent
//     sets the simulator's GOGC (its heap is about 200 KiB per node, and
//     the collector took a third of its CPU while a 10,000-alloc job
//     started). Both are off by default: in one 10,000-node run with both
//     on, the nodes registered at half the rate (the disk's pacing of the
//     first starts had spread the registrations), so they are for
//     experiments, not the figures.

// defaultGCPercent keeps Go's default GOGC.
const defaultGCPercent = 0

// tuneGC sets the collector's target, unless GOGC is set.
func tuneGC(percent int) {
	if os.Getenv("GOGC") != "" || percent <= 0 {
		return
	}
	debug.SetGCPercent(percent)
}

// nodesRoot is where the nodes' data dirs go: a directory of its own under
// /dev/shm when that is a writable directory, else under dir. The returned
// cleanup removes it.
func nodesRoot(dir string) (string, func()) {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "nodesim-nodes-"); err == nil {
			return d, func() { os.RemoveAll(d) }
		}
	}
	return filepath.Join(dir, "nodes"), func() {}
}

// wantFiles is the open-files limit the simulator asks for.
const wantFiles = 1 << 18

// raiseFileLimit raises the open-files limit, hard and soft, to wantFiles
// when allowed (root), else the soft one to the hard one; the servers the
// simulator starts inherit it.
func raiseFileLimit() {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur >= wantFiles {
		return
	}
	if lim.Max < wantFiles {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: wantFiles, Max: wantFiles}); err == nil {
			return
		}
	}
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: min(lim.Max, wantFiles), Max: lim.Max})
}
