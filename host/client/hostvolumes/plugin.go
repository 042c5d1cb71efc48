package hostvolumes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// MkdirPluginID is the built-in plugin: a directory with owner and mode.
const MkdirPluginID = "mkdir"

// Operations of the plugin contract.
const (
	OpFingerprint = "fingerprint"
	OpCreate      = "create"
	OpDelete      = "delete"
)

var (
	// ErrUnknownPlugin is returned when a volume names a plugin that is
	// neither built in nor an executable of host_volume_plugin_dir.
	ErrUnknownPlugin = errcode.New(codes.FailedPrecondition, "no such host volume plugin on the node")
	// ErrPluginFailed is returned when a plugin exits non-zero or answers
	// what the contract does not allow.
	ErrPluginFailed = errcode.New(codes.Internal, "host volume plugin failed")
	// ErrPluginTimeout is returned when a plugin does not answer within
	// its operation's deadline (or the caller's): it was killed, but may
	// have acted first, so the outcome is unknown (DeadlineExceeded, an
	// uncertain code: the servers keep the volume's record).
	ErrPluginTimeout = errcode.New(codes.DeadlineExceeded, "host volume plugin did not answer in time; it may have acted")
	// ErrPluginCanceled is returned when the caller gave up on a plugin
	// run: it was killed, but may have acted first.
	ErrPluginCanceled = errcode.New(codes.Canceled, "host volume plugin run canceled; it may have acted")
	// ErrBadParameters is returned when a volume's parameters do not suit
	// its plugin (mkdir's uid, gid, mode).
	ErrBadParameters = errcode.New(codes.InvalidArgument, "invalid host volume parameters")
)

// Request is one operation on one volume.
type Request struct {
	ID, Name, NodeID         string
	CapacityMin, CapacityMax int64
	Parameters               map[string]string
	// Path is where the volume is to be: <host_volumes_dir>/<id>.
	Path string
	// CreatedPath is what create answered (delete).
	CreatedPath string
}

// Result is what create answers.
type Result struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

// Plugin makes and removes volumes.
type Plugin interface {
	Create(ctx context.Context, req Request) (Result, error)
	Delete(ctx context.Context, req Request) error
}

// Mkdir is the built-in plugin: Create makes req.Path, a directory, with
// parameters uid, gid (numbers; default the agent's) and mode (octal;
// default 0755), and answers 0 bytes (a directory has no size of its
// own); Delete removes req.Path and all it holds.
type Mkdir struct{}

var _ Plugin = Mkdir{}

// Create makes the directory with the asked owner and mode. One there
// already (a restore, a create sent again) is left as it is: its owner
// and mode may be what the task made them (a database's data directory),
// so only a directory Create made gets them.
func (Mkdir) Create(_ context.Context, req Request) (Result, error) {
	mode, uid, gid, err := mkdirParams(req.Parameters)
	if err != nil {
		return Result{}, err
	}
	err = os.Mkdir(req.Path, mode)
	made := err == nil
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return Result{}, err
	}
	st, err := os.Lstat(req.Path)
	if err != nil {
		return Result{}, err
	}
	if !st.IsDir() {
		return Result{}, fmt.Errorf("%s exists and is not a directory", req.Path)
	}
	if !made {
		return Result{Path: req.Path}, nil
	}
	// Mkdir's mode is masked by the umask; the asked mode is set as asked.
	if err := os.Chmod(req.Path, mode); err != nil {
		return Result{}, err
	}
	if uid >= 0 || gid >= 0 {
		if err := os.Lchown(req.Path, uid, gid); err != nil {
			return Result{}, err
		}
	}
	return Result{Path: req.Path}, nil
}

// Delete removes the directory; one already gone is deleted. It removes
// only <host_volumes_dir>/<id>: a created path that is anything else (a
// server's record of a volume this node has no record of) is refused.
func (Mkdir) Delete(_ context.Context, req Request) error {
	if p := req.CreatedPath; p != "" && filepath.Clean(p) != filepath.Clean(req.Path) {
		return fmt.Errorf("%w: mkdir removes only %s, not %s", ErrBadVolume, req.Path, p)
	}
	if req.Path == "" || filepath.Base(req.Path) != req.ID {
		return fmt.Errorf("%w: mkdir: %q is not the volume's directory", ErrBadVolume, req.Path)
	}
	return os.RemoveAll(req.Path)
}

func mkdirParams(p map[string]string) (mode fs.FileMode, uid, gid int, err error) {
	mode, uid, gid = 0o755, -1, -1
	for k, v := range p {
		switch k {
		case "mode":
			m, perr := strconv.ParseUint(v, 8, 32)
			if perr != nil || m > 0o7777 {
				return 0, 0, 0, fmt.Errorf("%w: mode %q: an octal permission such as \"0750\"", ErrBadParameters, v)
			}
			mode = fs.FileMode(m&0o777) | unixBits(m)
		case "uid", "gid":
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 0 {
				return 0, 0, 0, fmt.Errorf("%w: %s %q: a non-negative number", ErrBadParameters, k, v)
			}
			if k == "uid" {
				uid = n
			} else {
				gid = n
			}
		default:
			return 0, 0, 0, fmt.Errorf("%w: the mkdir plugin takes uid, gid and mode, not %q", ErrBadParameters, k)
		}
	}
	return mode, uid, gid, nil
}

func unixBits(m uint64) fs.FileMode {
	var out fs.FileMode
	if m&0o4000 != 0 {
		out |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}

// External is a plugin executable run with the package's contract.
type External struct {
	ID         string
	Path       string
	PluginDir  string
	VolumesDir string
}

var _ Plugin = (*External)(nil)

// Bounds of a plugin run: what of its stdout is read (more is an error),
// what of a failed run's stderr an error carries (the end).
const (
	stdoutMax  = 64 << 10
	stderrKept = 1024
)

// Deadlines of one plugin run by operation (Nomad's): a plugin that takes
// longer is killed with its process group.
var opTimeouts = map[string]time.Duration{
	OpFingerprint: 5 * time.Second,
	OpCreate:      60 * time.Second,
	OpDelete:      60 * time.Second,
}

// Contract values berth has one of: Nomad's plugins read them (and may
// run under set -u).
const (
	contractNamespace = "default"
	contractNodePool  = "default"
)

// run runs one operation and returns its stdout. The plugin gets PATH and
// the contract's DHV_* variables only, runs in a process group of its own
// that is killed whole when the operation's deadline passes or ctx ends,
// and may answer {"error": "..."} to fail with that message.
func (e *External) run(ctx context.Context, op string, req Request) ([]byte, error) {
	params, err := json.Marshal(req.Parameters)
	if err != nil {
		return nil, err
	}
	if req.Parameters == nil {
		params = []byte("{}")
	}
	timeout := opTimeouts[op]
	ctx, cancel := context.WithTimeoutCause(ctx, timeout,
		fmt.Errorf("%w: %s %s: no answer within %s", ErrPluginTimeout, e.Path, op, timeout))
	defer cancel()
	cmd := exec.CommandContext(ctx, e.Path, op)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"DHV_OPERATION=" + op,
		"DHV_VOLUMES_DIR=" + e.VolumesDir,
		"DHV_PLUGIN_DIR=" + e.PluginDir,
		"DHV_HOST_PATH=" + req.Path,
		"DHV_NODE_ID=" + req.NodeID,
		"DHV_NODE_POOL=" + contractNodePool,
		"DHV_NAMESPACE=" + contractNamespace,
		"DHV_VOLUME_NAME=" + req.Name,
		"DHV_VOLUME_ID=" + req.ID,
		"DHV_CAPACITY_MIN_BYTES=" + strconv.FormatInt(req.CapacityMin, 10),
		"DHV_CAPACITY_MAX_BYTES=" + strconv.FormatInt(req.CapacityMax, 10),
		"DHV_PARAMETERS=" + string(params),
	}
	if op == OpDelete {
		cmd.Env = append(cmd.Env, "DHV_CREATED_PATH="+req.CreatedPath)
	}
	killGroupOnCancel(cmd)
	stdout := &capBuffer{max: stdoutMax}
	stderr := &tailBuffer{keep: stderrKept}
	runErr := runDrained(cmd, stdout, stderr)
	if runErr != nil && ctx.Err() != nil {
		return nil, interrupted(ctx, e.Path, op)
	}
	if stdout.over {
		return nil, fmt.Errorf("%w: %s %s: answered more than %d bytes", ErrPluginFailed, e.Path, op, stdoutMax)
	}
	if msg := answeredError(stdout.Bytes()); msg != "" {
		return nil, fmt.Errorf("%w: %s %s: %s", ErrPluginFailed, e.Path, op, msg)
	}
	if runErr != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("%w: %s %s: %v: %s", ErrPluginFailed, e.Path, op, runErr, msg)
		}
		return nil, fmt.Errorf("%w: %s %s: %v", ErrPluginFailed, e.Path, op, runErr)
	}
	return stdout.Bytes(), nil
}

// drainGrace bounds how long the output of an exited plugin is read on
// after its process group was killed (a child that left the group may
// hold the pipes).
const drainGrace = 2 * time.Second

// runDrained runs cmd with its stdout and stderr read through pipes it
// drains itself into out and errOut (bounded writers), and kills cmd's
// process group as soon as the plugin exits: a background child that
// keeps the pipes open neither holds the answer back nor outlives the
// run. (exec's own copying would wait for the child to close them.)
func runDrained(cmd *exec.Cmd, out, errOut io.Writer) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	startErr := cmd.Start()
	outW.Close()
	errW.Close()
	if startErr != nil {
		outR.Close()
		errR.Close()
		return startErr
	}
	var wg sync.WaitGroup
	for _, p := range []struct {
		r *os.File
		w io.Writer
	}{{outR, out}, {errR, errOut}} {
		wg.Go(func() { _, _ = io.Copy(p.w, p.r) })
	}
	waitErr := cmd.Wait()
	killGroup(cmd)
	drained := make(chan struct{})
	go func() {
		wg.Wait()
		close(drained)
	}()
	timer := time.NewTimer(drainGrace)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
	}
	outR.Close() // ends a read still blocked
	errR.Close()
	<-drained
	return waitErr
}

// interrupted is the error of a run killed because ctx ended: its own
// deadline (the cause), the caller's deadline, or the caller's cancel.
// The plugin may have acted before it was killed.
func interrupted(ctx context.Context, path, op string) error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrPluginTimeout):
		return cause
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w: %s %s: the caller's deadline passed: %v", ErrPluginTimeout, path, op, cause)
	default:
		return fmt.Errorf("%w: %s %s: %v", ErrPluginCanceled, path, op, cause)
	}
}

// answeredError returns the message of a {"error": "..."} answer, or "".
func answeredError(out []byte) string {
	var a struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(bytes.TrimSpace(out), &a) != nil {
		return ""
	}
	return strings.TrimSpace(a.Error)
}

// capBuffer keeps up to max bytes and notes that more came. (Not an
// embedded bytes.Buffer: its ReadFrom would bypass Write.)
type capBuffer struct {
	b    []byte
	max  int
	over bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	n := len(p) // all taken: the plugin is not blocked on a full pipe
	room := c.max - len(c.b)
	if len(p) > room {
		c.over = true
		p = p[:max(room, 0)]
	}
	c.b = append(c.b, p...)
	return n, nil
}

func (c *capBuffer) Bytes() []byte { return c.b }

// tailBuffer keeps the last keep bytes written.
type tailBuffer struct {
	b    []byte
	keep int
	cut  bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.keep {
		t.b = append(t.b[:0], t.b[len(t.b)-t.keep:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	if t.cut {
		return "…" + string(t.b)
	}
	return string(t.b)
}

// Create runs `<plugin> create` and reads its answer.
func (e *External) Create(ctx context.Context, req Request) (Result, error) {
	out, err := e.run(ctx, OpCreate, req)
	if err != nil {
		return Result{}, err
	}
	var r Result
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return Result{}, fmt.Errorf("%w: create answered %q, not {\"path\": ..., \"bytes\": ...}: %v", ErrPluginFailed, truncate(out), err)
	}
	if !filepath.IsAbs(r.Path) || r.Bytes < 0 {
		return Result{}, fmt.Errorf("%w: create answered path %q and %d bytes: want an absolute path and bytes >= 0", ErrPluginFailed, r.Path, r.Bytes)
	}
	return r, nil
}

// Delete runs `<plugin> delete`.
func (e *External) Delete(ctx context.Context, req Request) error {
	_, err := e.run(ctx, OpDelete, req)
	return err
}

// Fingerprint runs `<plugin> fingerprint` and answers its version.
func (e *External) Fingerprint(ctx context.Context) (string, error) {
	out, err := e.run(ctx, OpFingerprint, Request{})
	if err != nil {
		return "", err
	}
	var fp struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &fp); err != nil || fp.Version == "" {
		return "", fmt.Errorf("%w: fingerprint answered %q, not {\"version\": \"...\"}", ErrPluginFailed, truncate(out))
	}
	return fp.Version, nil
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// lookupPlugin finds plugin id: the built-in mkdir, or an executable
// regular file of pluginDir named id.
func lookupPlugin(id, pluginDir, volumesDir string) (Plugin, error) {
	if id == "" || id == MkdirPluginID {
		return Mkdir{}, nil
	}
	if id == "." || id == ".." || strings.ContainsAny(id, `/\`) {
		return nil, fmt.Errorf("%w: %q is not a plugin name (a file name of host_volume_plugin_dir)", ErrUnknownPlugin, id)
	}
	if pluginDir == "" {
		return nil, fmt.Errorf("%w: %q: the client has no host_volume_plugin_dir", ErrUnknownPlugin, id)
	}
	p := filepath.Join(pluginDir, id)
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %q is neither built in (%q) nor in %s", ErrUnknownPlugin, id, MkdirPluginID, pluginDir)
	case err != nil:
		return nil, fmt.Errorf("%w: %q: %v", ErrUnknownPlugin, id, err)
	case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
		return nil, fmt.Errorf("%w: %s is not an executable file", ErrUnknownPlugin, p)
	}
	return &External{ID: id, Path: p, PluginDir: pluginDir, VolumesDir: volumesDir}, nil
}
