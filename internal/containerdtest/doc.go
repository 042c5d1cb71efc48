// Package containerdtest runs a private containerd daemon for tests: its
// own socket, root and state under one temporary directory, the CRI plugin
// disabled, so tests neither need nor touch the machine's containerd.
//
// `make test` runs the module tests under one such daemon for the whole run
// (internal/withcontainerd) and hands its socket to them in
// BERTH_CONTAINERD_ADDRESS (EnvAddress). A test that needs containerd calls
// Address: the variable's socket when set (make test's daemon, or the
// system's: BERTH_CONTAINERD_ADDRESS=/run/containerd/containerd.sock), else
// a daemon of its own, stopped when the test ends. Where containerd cannot
// run (not root, no containerd or runc binary) the test ends through
// testutil.Unavailable: skipped with the reason, failed under CI=true; a
// daemon that could run but does not come up fails the test.
//
// Stop ends what the daemon ran: every task still running in any of its
// namespaces is killed and deleted with its container (through ctr, which
// Debian's containerd package ships), the daemon is stopped by its PID
// (SIGTERM, then SIGKILL after StopTimeout), a shim it left is killed by
// PID (found by the daemon's socket on its command line), whatever is still
// mounted under the directory is unmounted, and the directory is removed.
package containerdtest
