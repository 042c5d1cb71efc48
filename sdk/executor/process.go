package executor

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/sdk/internal/sdkerr"
	"berth.dev/berth/sdk/procfs"
)

// Errors of the driver side.
var (
	// ErrLost is returned by Recover when neither the executor nor a
	// recorded exit can be found: the task is gone and how it ended is
	// unknown (e.g. the node rebooted).
	ErrLost = sdkerr.New(codes.NotFound, "TASK_LOST", "task lost: executor gone and no exit recorded")
	// ErrExited is returned by Signal and Kill when the task has exited.
	ErrExited = sdkerr.New(codes.FailedPrecondition, "TASK_EXITED", "task has exited")
)

// pollInterval is how often a recovered Process looks for exit.json.
const pollInterval = 100 * time.Millisecond

// Command is how a driver re-executes its binary as an executor.
type Command struct {
	// Path is the binary; it must reach Main when Requested (ServeDriver
	// does).
	Path string
	// Name is argv[0] (default Path); Args follow it.
	Name string
	Args []string
}

// Self returns the Command that re-executes this process's binary with
// its own arguments, which lands in ServeDriver (or the TestMain hook of
// drivertest) again and from there in Main. It execs /proc/self/exe, the
// running image, so an executor matches its driver even after the binary
// on disk was replaced by an upgrade.
func Self() (Command, error) {
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		return Command{}, fmt.Errorf("executor: find own binary: %w", err)
	}
	return Command{Path: "/proc/self/exe", Name: os.Args[0], Args: append([]string(nil), os.Args[1:]...)}, nil
}

// Process is a task under an executor, seen from the driver.
type Process struct {
	state  State
	logger hclog.Logger

	done chan struct{}
	exit *Exit
	once sync.Once
	// ctx ends when Close stops the watcher.
	ctx    context.Context
	cancel context.CancelFunc
}

// Start runs spec under a new executor and returns once the task has
// started, or failed to: a task that did not start is a *StartError (its
// program or working directory is missing, say); other errors are the
// executor's own. ctx bounds the
// start; if it ends first the executor and task are killed.
func Start(ctx context.Context, command Command, spec Spec, logger hclog.Logger) (*Process, error) {
	if spec.ExecutorLog != "" {
		return nil, errExecutorLogSet
	}
	if err := prepareStateDir(spec.StateDir, logger); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(spec.StateDir, executorLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	defer logFile.Close()
	ex, err := spawn(command, markerValue, logFile)
	if err != nil {
		return nil, err
	}
	return ex.deliver(ctx, spec, logger)
}

// prepareStateDir makes a task's state directory and ends what an earlier
// executor of it left (reapOrphan).
func prepareStateDir(dir string, logger hclog.Logger) error {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("executor: state dir: %w", err)
	}
	return reapOrphan(dir, logger)
}

// spawned is an executor process started and waiting for its spec on
// specW; statusR reads its status pipe.
type spawned struct {
	cmd     *exec.Cmd
	specW   *os.File
	statusR *os.File
	// reaped is closed once the process is waited for.
	reaped chan struct{}
}

// spawn starts command as an executor (marker: what kind) with its output
// to out and env added to this process's environment.
func spawn(command Command, marker string, out *os.File, env ...string) (*spawned, error) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	defer specR.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		specW.Close()
		return nil, fmt.Errorf("executor: %w", err)
	}
	cmd := &exec.Cmd{
		Path:       command.Path,
		Args:       append([]string{cmp.Or(command.Name, command.Path)}, command.Args...),
		Env:        append(append(os.Environ(), env...), markerEnv+"="+marker),
		Stdin:      specR,
		Stdout:     out,
		Stderr:     out,
		ExtraFiles: []*os.File{statusW},
		// A session of its own: signals for the plugin's process group or
		// terminal do not reach it, and it outlives the plugin.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	statusW.Close()
	if err != nil {
		statusR.Close()
		specW.Close()
		return nil, fmt.Errorf("executor: start %s: %w", command.Path, err)
	}
	ex := &spawned{cmd: cmd, specW: specW, statusR: statusR, reaped: make(chan struct{})}
	go func() { cmd.Wait(); close(ex.reaped) }()
	return ex, nil
}

// errExecutorLogSet is Start's and Standby.Start's error for a spec whose
// ExecutorLog a caller set: it is theirs to set, and would be ignored.
var errExecutorLogSet = errors.New("executor: Spec.ExecutorLog is set by Standby.Start, not by callers (the executor's log is StateDir/executor.log)")

// errSpecNotSent is deliver's error when the executor was gone before its
// spec could be sent: it never started the task.
var errSpecNotSent = errors.New("the executor was gone before its spec was sent")

// deliver sends spec to the executor and returns once it reports the task
// started, or failed to (see Start).
func (ex *spawned) deliver(ctx context.Context, spec Spec, logger hclog.Logger) (*Process, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	cmd, statusR, reaped := ex.cmd, ex.statusR, ex.reaped
	specData, err := json.Marshal(spec)
	if err != nil {
		ex.specW.Close()
		statusR.Close()
		cmd.Process.Kill()
		<-reaped
		return nil, fmt.Errorf("executor: encode spec: %w", err)
	}
	_, werr := ex.specW.Write(specData)
	ex.specW.Close()

	type reply struct {
		st  startStatus
		err error
	}
	replies := make(chan reply, 1)
	// ended is closed when the executor reports the task's exit recorded,
	// or dies: the status pipe's second line or its EOF. That is sooner
	// than the executor's own exit (a race-enabled binary lingers a second).
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer statusR.Close()
		br := bufio.NewReader(statusR)
		line, err := br.ReadBytes('\n')
		if err != nil {
			replies <- reply{err: fmt.Errorf("executor exited before reporting (see %s): %w",
				filepath.Join(spec.StateDir, executorLog), err)}
			return
		}
		var st startStatus
		err = json.Unmarshal(line, &st)
		replies <- reply{st: st, err: err}
		br.ReadBytes('\n')
	}()
	var r reply
	select {
	case r = <-replies:
	case <-ctx.Done():
		cmd.Process.Kill() // the task dies with it (parent-death signal)
		<-reaped
		return nil, fmt.Errorf("executor: start: %w", ctx.Err())
	}
	if werr != nil && r.err != nil && r.st.Failure == nil {
		// It died without the spec, so without forking the task.
		cmd.Process.Kill()
		<-reaped
		return nil, fmt.Errorf("executor: %w: %w (then: %w)", errSpecNotSent, werr, r.err)
	}
	if r.err == nil && werr != nil {
		r.err = fmt.Errorf("send spec: %w", werr)
	}
	if r.err == nil && r.st.Failure != nil {
		r.err = r.st.Failure
	}
	if r.err == nil && r.st.Task.Pid <= 0 {
		r.err = errors.New("executor reported no task pid")
	}
	if r.err != nil {
		cmd.Process.Kill()
		<-reaped
		if r.st.Failure != nil {
			return nil, r.st.Failure // its message says "executor" already
		}
		return nil, fmt.Errorf("executor: %w", r.err)
	}
	self, err := procfs.Self(cmd.Process.Pid)
	if err != nil {
		// It just replied, so it can only be gone if it already finished.
		self = procfs.Identity{Pid: cmd.Process.Pid}
	}
	p := newProcess(State{Executor: self, Task: r.st.Task, StateDir: spec.StateDir, Group: r.st.Group}, logger)
	go p.watch(func(ctx context.Context) {
		select {
		case <-ended:
		case <-ctx.Done():
		}
	})
	return p, nil
}

// Recover finds the executor of a task from its persisted State. The task
// may have exited meanwhile; its Process then reports that exit at once.
func Recover(state State, logger hclog.Logger) (*Process, error) {
	if !filepath.IsAbs(state.StateDir) || state.Executor.Pid <= 0 || state.Task.Pid <= 0 {
		return nil, fmt.Errorf("executor: recover: incomplete state %+v", state)
	}
	exit, err := readExit(state.StateDir)
	if err != nil {
		return nil, fmt.Errorf("executor: recover: %w", err)
	}
	p := newProcess(state, logger)
	if exit != nil {
		p.finish(exit)
		return p, nil
	}
	alive, err := state.Executor.Alive()
	if err != nil {
		return nil, fmt.Errorf("executor: recover: %w", err)
	}
	if !alive {
		// It may have written its exit between our two looks.
		if exit, err := readExit(state.StateDir); err == nil && exit != nil {
			p.finish(exit)
			return p, nil
		}
		return nil, fmt.Errorf("executor: recover pid %d: %w", state.Executor.Pid, ErrLost)
	}
	go p.watch(func(ctx context.Context) {
		t := time.NewTicker(pollInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if exit, _ := readExit(state.StateDir); exit != nil {
				return
			}
			if alive, err := state.Executor.Alive(); err == nil && !alive {
				return
			}
		}
	})
	return p, nil
}

func newProcess(state State, logger hclog.Logger) *Process {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Process{state: state, logger: logger, done: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// watch runs waitGone until the executor is gone (or Close), then records
// the exit it left.
func (p *Process) watch(waitGone func(ctx context.Context)) {
	waitGone(p.ctx)
	if p.ctx.Err() != nil {
		return
	}
	exit, err := readExit(p.state.StateDir)
	if err != nil || exit == nil {
		msg := "executor exited without recording the task's exit status"
		if err != nil {
			msg += ": " + err.Error()
		}
		p.logger.Error("task exit unknown", "state_dir", p.state.StateDir, "error", msg)
		exit = &Exit{ExitCode: -1, Err: msg, FinishedAt: time.Now().UnixNano()}
	}
	p.finish(exit)
}

func (p *Process) finish(exit *Exit) {
	p.once.Do(func() {
		p.exit = exit
		close(p.done)
	})
}

// State returns what to persist to Recover this process later.
func (p *Process) State() State { return p.state }

// Pid returns the task's PID (its process group ID too).
func (p *Process) Pid() int { return p.state.Task.Pid }

// Done is closed when the task has exited and its Exit is known.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until the task exits or ctx ends.
func (p *Process) Wait(ctx context.Context) (*Exit, error) {
	select {
	case <-p.done:
		e := *p.exit
		return &e, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Signal sends sig to the task's process group (an isolated task's own,
// or its init's for the init to forward; signal_direct.go). It returns ErrExited once
// the task is gone, and never signals a process that merely reuses the
// task's PID.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return ErrExited
	default:
	}
	if p.signalGroup(sig) {
		return nil
	}
	err := p.state.Task.SignalGroup(sig)
	if errors.Is(err, procfs.ErrNoProcess) {
		return ErrExited
	}
	return err
}

// Kill sends SIGKILL to the task's process group.
func (p *Process) Kill() error { return p.Signal(syscall.SIGKILL) }

// Close stops watching the executor; the task is not affected.
func (p *Process) Close() { p.cancel() }

// reapOrphan kills a task left in stateDir by an earlier Start whose
// driver died before it could hand out a handle: nobody can recover it, and
// the caller is about to start the task afresh.
func reapOrphan(stateDir string, logger hclog.Logger) error {
	var st State
	err := readJSON(filepath.Join(stateDir, stateFile), &st)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		if alive, _ := st.Executor.Alive(); alive {
			logger.Warn("killing orphaned task from an earlier start", "state_dir", stateDir, "pid", st.Task.Pid)
			st.Task.SignalGroup(syscall.SIGKILL)
			st.Executor.Signal(syscall.SIGKILL)
		}
	}
	for _, f := range []string{stateFile, exitFile} {
		if err := os.Remove(filepath.Join(stateDir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("executor: clear state dir: %w", err)
		}
	}
	return nil
}
