package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
)

// The simulator's own costs, kept off what it measures. Thousands of
// nodes in one process are thousands of hosts on one disk and one heap:
//
//   - the nodes' data dirs (node ID file, alloc and task dirs the real
//     alloc runners build) go on a memory file system when the host has
//     one (/dev/shm), so 10,000 nodes' mkdirs and first-start fsyncs do
//     not queue on the disk the servers' raft logs are on;
//   - the open files: every node holds a connection to each server it
//     has talked to, up to three when the servers are slow and its calls
//     fail over, which passes a 20,000 limit at 10,000 nodes; the
//     simulator raises its limit (and so the servers' it starts) when it
//     may;
//   - the heap (about 200 KiB per node: 2 GiB at 10,000 nodes) is
//     collected less often (gcPercent), since a collection marks every
//     node's goroutines and state, and at the Go default the simulator
//     spent a third of its CPU in the collector while a 10,000-alloc job
//     started.

// defaultGCPercent is the simulator's GOGC unless the environment sets one.
const defaultGCPercent = 300

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
