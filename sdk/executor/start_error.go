package executor

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// StartKind says why the executor could not start a task. The values are
// those of sdk.StartReason, to which a driver maps them.
type StartKind string

const (
	// StartNotFound: the program (Path) or a directory on its path does not
	// exist.
	StartNotFound StartKind = "not-found"
	// StartPermissionDenied: the program (Path) may not be executed.
	StartPermissionDenied StartKind = "permission-denied"
	// StartBadWorkingDir: the working directory (Path) is missing or not a
	// directory.
	StartBadWorkingDir StartKind = "bad-working-dir"
	// StartOther: anything else (the program's format, a log file that
	// cannot be opened); Detail says what.
	StartOther StartKind = "other"
)

// StartError is returned by Start when the task did not start. The
// executor sends it to its driver as JSON on the status pipe, the same
// binary at both ends (Self execs the running image), so the record is not
// versioned; it is never persisted. Drivers turn it into sdk.StartError
// with errors.As and never read its message.
type StartError struct {
	Kind StartKind `json:"kind"`
	// Path is the file Kind is about: the program or the working directory.
	Path string `json:"path,omitempty"`
	// Detail is the operating system's account, for humans.
	Detail string `json:"detail,omitempty"`
}

// Error implements error.
func (e *StartError) Error() string {
	msg := "executor: task did not start: " + string(e.Kind)
	if e.Path != "" {
		msg += ": " + e.Path
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// otherFailure is a failure the task's config is not to blame for.
func otherFailure(path string, err error) *StartError {
	return &StartError{Kind: StartOther, Path: path, Detail: detail(err)}
}

// detail is err's text without the path a *fs.PathError repeats.
func detail(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// checkWorkDir reports a working directory the task cannot start in. The
// kernel's own failure to enter it would come back from exec as an errno
// naming the program, indistinguishable from the program's own.
func checkWorkDir(dir string) *StartError {
	if dir == "" {
		return nil
	}
	st, err := os.Stat(dir)
	if err != nil {
		return &StartError{Kind: StartBadWorkingDir, Path: dir, Detail: detail(err)}
	}
	if !st.IsDir() {
		return &StartError{Kind: StartBadWorkingDir, Path: dir, Detail: syscall.ENOTDIR.Error()}
	}
	return nil
}

// classifyStart turns the error of starting spec's program into a
// StartError. The errno is the kernel's answer to chdir or execve in the
// child; the working directory was checked just before, so it is taken as
// the program's unless the directory went away meanwhile. (A directory the
// task's user may not enter also fails with EACCES, and is reported as the
// program's permission problem: telling the two apart would mean redoing
// the kernel's permission checks.)
func classifyStart(spec *Spec, err error) *StartError {
	if bad := checkWorkDir(spec.Dir); bad != nil {
		return bad
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return otherFailure(spec.Path, err)
	}
	kind := StartOther
	switch errno {
	case syscall.ENOENT, syscall.ENOTDIR:
		kind = StartNotFound
	case syscall.EACCES, syscall.EPERM:
		kind = StartPermissionDenied
	}
	return &StartError{Kind: kind, Path: spec.Path, Detail: errno.Error()}
}
