package allocdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// SharedName is the name of the shared dir inside an alloc dir.
const SharedName = "alloc"

// ErrInvalidName is returned for an alloc ID or task name that is not a
// single, safe path element.
var ErrInvalidName = errcode.New(codes.InvalidArgument, "not a valid alloc dir name")

// AllocDir is the directory tree of one alloc.
type AllocDir struct {
	// Dir is <data_dir>/alloc/<alloc>.
	Dir string
	// Shared is Dir/alloc, LogDir Dir/alloc/logs.
	Shared, LogDir string
}

// TaskDir is the directory tree of one task.
type TaskDir struct {
	// Dir is the task's working dir, <alloc dir>/<task>.
	Dir                 string
	Local, Secrets, Tmp string
	// Shared is the alloc's shared dir, LogDir its log dir.
	Shared, LogDir string
}

// checkName refuses what is not one path element, or is the shared dir.
func checkName(kind, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%s %q: %w", kind, name, ErrInvalidName)
	}
	return nil
}

// New returns the alloc dir of allocID under dataDir; it creates nothing.
func New(dataDir, allocID string) (*AllocDir, error) {
	if err := checkName("alloc", allocID); err != nil {
		return nil, err
	}
	dir := filepath.Join(dataDir, "alloc", allocID)
	shared := filepath.Join(dir, SharedName)
	return &AllocDir{Dir: dir, Shared: shared, LogDir: filepath.Join(shared, "logs")}, nil
}

// Build creates the alloc dir and its shared dir.
func (a *AllocDir) Build() error {
	for _, d := range []string{a.Dir, a.Shared, filepath.Join(a.Shared, "data"), filepath.Join(a.Shared, "tmp"), a.LogDir} {
		if err := mkdir(d, 0o755); err != nil {
			return fmt.Errorf("alloc dir: %w", err)
		}
	}
	return nil
}

// TaskDir returns the dirs of task; it creates nothing.
func (a *AllocDir) TaskDir(task string) (TaskDir, error) {
	if err := checkName("task", task); err != nil {
		return TaskDir{}, err
	}
	if task == SharedName {
		return TaskDir{}, fmt.Errorf("task %q: %w: it is the name of the alloc's shared dir", task, ErrInvalidName)
	}
	dir := filepath.Join(a.Dir, task)
	return TaskDir{Dir: dir, Local: filepath.Join(dir, "local"), Secrets: filepath.Join(dir, "secrets"),
		Tmp: filepath.Join(dir, "tmp"), Shared: a.Shared, LogDir: a.LogDir}, nil
}

// Build creates the task's dirs (and the alloc's, if missing); secrets is
// made 0700 even when it existed with looser permissions.
func (t TaskDir) Build() error {
	for _, d := range []string{t.Dir, t.Local, t.Tmp, t.LogDir} {
		if err := mkdir(d, 0o755); err != nil {
			return fmt.Errorf("task dir: %w", err)
		}
	}
	if err := mkdir(t.Secrets, 0o700); err != nil {
		return fmt.Errorf("task dir: %w", err)
	}
	if err := os.Chmod(t.Secrets, 0o700); err != nil {
		return fmt.Errorf("task dir: %w", err)
	}
	return nil
}

// ErrMountedInside is returned by Destroy when a mount under the alloc dir
// could not be removed: deleting the tree would delete through the mount
// (a volume's data, a host directory).
var ErrMountedInside = errcode.New(codes.FailedPrecondition, "a mount under the alloc dir could not be removed")

// Destroy removes the alloc dir and everything in it; a missing dir is
// not an error. Whatever is still mounted under it (a task's volume bind
// a crash left behind) is unmounted first, deepest first; if that fails
// nothing is removed, so a removal never reaches through a mount.
func (a *AllocDir) Destroy() error {
	if err := unmountUnder(a.Dir); err != nil {
		return fmt.Errorf("removing alloc dir %s: %w: %w", a.Dir, ErrMountedInside, err)
	}
	if err := os.RemoveAll(a.Dir); err != nil {
		return fmt.Errorf("removing alloc dir: %w", err)
	}
	return nil
}

// TaskLogs locates one task's log files: Dir holds them, named
// "<task>.stdout.<n>" and "<task>.stderr.<n>", n counting up as the
// driver rotates them.
type TaskLogs struct {
	Dir  string
	Task string
}

// Logs returns where task's log files are.
func (a *AllocDir) Logs(task string) (TaskLogs, error) {
	if err := checkName("task", task); err != nil {
		return TaskLogs{}, err
	}
	return TaskLogs{Dir: a.LogDir, Task: task}, nil
}

// Prefix is the file name prefix of one stream: "<task>.stdout." or
// "<task>.stderr.".
func (l TaskLogs) Prefix(stderr bool) string {
	if stderr {
		return l.Task + ".stderr."
	}
	return l.Task + ".stdout."
}

// Files returns the files of one stream in the order they were written
// (by their number), with their full paths; none before the task wrote.
func (l TaskLogs) Files(stderr bool) ([]string, error) {
	entries, err := os.ReadDir(l.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading log dir: %w", err)
	}
	prefix := l.Prefix(stderr)
	type numbered struct {
		n    int
		path string
	}
	var files []numbered
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			continue
		}
		files = append(files, numbered{n, filepath.Join(l.Dir, e.Name())})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].n < files[j].n })
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.path
	}
	return out, nil
}
