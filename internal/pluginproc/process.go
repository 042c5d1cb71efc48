package pluginproc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A plugin process a supervisor starts listens in a directory of its own
// (go-plugin's PLUGIN_UNIX_SOCKET_DIR), removed once the process is gone:
// a plugin that is killed, or dies, cannot remove its socket itself.

// socketDirPrefix names the socket directories of kind's plugin name.
func socketDirPrefix(kind, name string) string { return "berth-" + kind + "-" + name + "-" }

// NewSocketDir creates the socket directory of a new process of kind's
// plugin name ("driver", "raw_exec").
func NewSocketDir(kind, name string) (string, error) {
	return os.MkdirTemp("", socketDirPrefix(kind, name))
}

// OwnedSocketDir returns the directory of a reattached plugin's socket if
// NewSocketDir created it, else "" (an address from a damaged record must
// not make berth delete an arbitrary directory).
func OwnedSocketDir(kind, name, addr string) string {
	dir := filepath.Dir(addr)
	if filepath.Dir(dir) != filepath.Clean(os.TempDir()) || !strings.HasPrefix(filepath.Base(dir), socketDirPrefix(kind, name)) {
		return ""
	}
	return dir
}

// RemoveSocketDir removes dir, if any.
func RemoveSocketDir(dir string) {
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// FailedByItself describes how a plugin process that failed before its
// handshake ended ("exited with status 2", "was killed by segmentation
// fault"), or returns false when it did not end by itself: it succeeded,
// or was SIGKILLed (by the launcher giving up on it).
func FailedByItself(st *os.ProcessState) (string, bool) {
	if st == nil {
		return "", false
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok || !((ws.Exited() && ws.ExitStatus() != 0) || (ws.Signaled() && ws.Signal() != syscall.SIGKILL)) {
		return "", false
	}
	if ws.Signaled() {
		return "was killed by " + ws.Signal().String(), true
	}
	return fmt.Sprintf("exited with status %d", ws.ExitStatus()), true
}

// CheckExecutable checks that path is a regular, executable file, so a
// launch fails saying so rather than with go-plugin's error. missing wraps
// the answer when the file is not there (or no path is known), and
// notExecutable when it is there but cannot run; each package passes its
// own sentinels, which carry its gRPC codes.
func CheckExecutable(path string, missing, notExecutable error) error {
	if path == "" {
		return fmt.Errorf("%w: no plugin_dir to look in", missing)
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s does not exist", missing, path)
	case err != nil:
		return fmt.Errorf("%w: %v", missing, err)
	case !st.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file", notExecutable, path)
	case st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%w: %s has mode %v (chmod +x it)", notExecutable, path, st.Mode().Perm())
	}
	return nil
}
