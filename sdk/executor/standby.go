package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// A standby executor is started before the task it runs is known, so a
// task's start does not wait for this binary to be executed and
// initialised again (twice for an isolated task: the executor, then its
// namespace init; tens of milliseconds each for a large binary on a busy
// machine). It starts like any executor, and when isolated it starts its
// namespace init (with its task's output pipes) at once; then it waits for
// its spec on stdin. Standby.Start sends the spec, with the path of the
// executor's own log, which the standby takes as its stdout and stderr
// from then on: the rest is Start's. A spec without isolation given to an
// isolated standby (or the reverse) discards what was made ahead and
// starts the task as Start would.
//
// A standby never used ends when its stdin closes: Close, or the death of
// the driver that started it (the kernel closes the pipe); its namespace
// init dies with it (parent-death signal).
const (
	standbyValue         = "standby"
	standbyIsolatedValue = "standby-isolated"
)

// Standby is an executor started ahead of its task. Use it once, with
// Start, or Close it.
type Standby struct {
	command  Command
	ex       *spawned
	isolated bool
	// back is the scheduling its threads return to when it is taken (nil:
	// it was not started idle).
	back *unix.SchedAttr
	// ready gets nil once the standby wrote its ready byte on the status
	// pipe (it is a standby of this SDK), an error if the pipe ended first.
	ready chan error
}

// standbyReady is the byte a standby writes on its status pipe first: a
// binary built with an SDK older than standbys, started as one, runs its
// own main instead and never writes it.
const standbyReady = 'R'

// standbyReadyWait bounds Standby.Start's wait for that byte, once the
// standby was woken; a standby without it by then is discarded and the
// task started on a new executor.
var standbyReadyWait = 5 * time.Second

// NewStandby starts an executor from command that waits for its task;
// isolated makes it start a namespace init ahead too (for specs with an
// Isolation). Until its spec comes its output is discarded (it holds
// nothing of this process's, so it delays no one's reading of it); what it
// has to say by then goes to its log after.
func NewStandby(command Command, isolated bool) (*Standby, error) {
	marker := standbyValue
	if isolated {
		marker = standbyIsolatedValue
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	defer null.Close()
	ex, back, err := spawnIdle(command, marker, null)
	if err != nil {
		return nil, err
	}
	sb := &Standby{command: command, ex: ex, isolated: isolated, back: back, ready: make(chan error, 1)}
	go func() {
		var b [1]byte
		_, err := io.ReadFull(ex.statusR, b[:]) // one byte: the rest is deliver's
		if err == nil && b[0] != standbyReady {
			err = fmt.Errorf("standby wrote %q, not its ready byte", b[0])
		}
		sb.ready <- err
	}()
	return sb, nil
}

// Isolated reports whether the standby started a namespace init ahead.
func (s *Standby) Isolated() bool { return s.isolated }

// Alive reports whether the standby process is still there to be used.
func (s *Standby) Alive() bool {
	select {
	case <-s.ex.reaped:
		return false
	default:
		return true
	}
}

// Pid is the standby executor's process ID.
func (s *Standby) Pid() int { return s.ex.cmd.Process.Pid }

// Start runs spec on the standby, as Start runs it on a new executor. A
// standby that is gone, or that cannot be brought back to this process's
// scheduling (it waited under SCHED_IDLE), is discarded and spec started
// on a new executor, as Start would: the task is never run at a scheduling
// other than the driver's, and a standby's death before its spec does not
// fail the task.
func (s *Standby) Start(ctx context.Context, spec Spec, logger hclog.Logger) (*Process, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if spec.ExecutorLog != "" {
		s.Close()
		return nil, errExecutorLogSet
	}
	if err := prepareStateDir(spec.StateDir, logger); err != nil {
		s.Close()
		return nil, err
	}
	if !s.Alive() {
		logger.Warn("the executor started ahead is gone; starting a new one", "pid", s.Pid())
		s.Close()
		return Start(ctx, s.command, spec, logger)
	}
	if s.back != nil {
		if err := wakeProcess(s.Pid(), s.back); err != nil {
			logger.Warn("the executor started ahead could not be brought back from idle scheduling; starting a new one", "pid", s.Pid(), "error", err)
			s.Close()
			return Start(ctx, s.command, spec, logger)
		}
	}
	if err := s.awaitReady(); err != nil {
		logger.Warn("the executor started ahead is not a standby of this SDK, or did not start; starting a new one", "pid", s.Pid(), "error", err)
		s.Close()
		return Start(ctx, s.command, spec, logger)
	}
	fresh := spec
	spec.ExecutorLog = filepath.Join(spec.StateDir, executorLog)
	p, err := s.ex.deliver(ctx, spec, logger)
	if errors.Is(err, errSpecNotSent) {
		logger.Warn("the executor started ahead died before its spec; starting a new one", "pid", s.Pid(), "error", err)
		return Start(ctx, s.command, fresh, logger)
	}
	return p, err
}

// awaitReady waits, for standbyReadyWait at most, for the standby's ready
// byte.
func (s *Standby) awaitReady() error {
	t := time.NewTimer(standbyReadyWait)
	defer t.Stop()
	select {
	case err := <-s.ready:
		s.ready <- err // for a later look
		return err
	case <-t.C:
		return fmt.Errorf("no ready byte in %v (an executor built with an older SDK?)", standbyReadyWait)
	}
}

// standbyCloseWait bounds Close's wait for the standby to end on its own
// (it runs under SCHED_IDLE, and on a busy machine may not get the CPU
// for long) before it is killed, and then again for the kill.
var standbyCloseWait = 2 * time.Second

// Close ends a standby that was not used. It first puts the standby back
// under the driver's scheduling, as a start does (an idle process on a
// busy machine may not get the CPU to read its end for seconds, longer
// than a plugin's shutdown lasts, and a SIGKILL would not help: the dying
// process runs its exit idle too). It returns once the process is gone,
// or, when that takes longer than a bound, once it was sent SIGKILL and
// waited for as long again: it is reaped when it goes.
func (s *Standby) Close() {
	if s.back != nil {
		// A failure leaves it idle; it still ends, later.
		_ = wakeProcess(s.Pid(), s.back)
	}
	s.ex.specW.Close()
	s.ex.statusR.Close()
	t := time.NewTimer(standbyCloseWait)
	defer t.Stop()
	select {
	case <-s.ex.reaped:
		return
	case <-t.C:
	}
	s.ex.cmd.Process.Kill()
	t.Reset(standbyCloseWait)
	select {
	case <-s.ex.reaped:
	case <-t.C:
	}
}

// taskPipes are the pipes a task's output streams are copied through.
type taskPipes struct{ outR, outW, errR, errW *os.File }

func newTaskPipes() (taskPipes, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return taskPipes{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return taskPipes{}, err
	}
	return taskPipes{outR: outR, outW: outW, errR: errR, errW: errW}, nil
}

func (p taskPipes) close() {
	for _, f := range []*os.File{p.outR, p.outW, p.errR, p.errW} {
		f.Close()
	}
}

// startedAhead is what a standby executor made before its spec came.
type startedAhead struct {
	pipes taskPipes
	init  *pendingInit
}

// discard ends what was made ahead for a spec that does not use it.
func (a *startedAhead) discard() {
	if a.init != nil {
		a.init.abort()
	}
	a.pipes.close()
}

// standbyMain is a standby executor: it makes ahead what an isolated task
// needs, if asked, waits for its spec and runs it. Its stdin closed
// without a spec (the standby was not used) ends it quietly.
func standbyMain(isolated bool) int {
	syscall.CloseOnExec(3)
	status := os.NewFile(3, "status")
	if _, err := status.Write([]byte{standbyReady}); err != nil {
		return 1 // its driver is gone
	}
	var ahead *startedAhead
	var aheadErr error
	if isolated {
		pipes, err := newTaskPipes()
		if err == nil {
			init, bad := launchInit(pipes.outW, pipes.errW)
			if bad == nil {
				ahead = &startedAhead{pipes: pipes, init: init}
			} else {
				pipes.close()
				err = bad
			}
		}
		aheadErr = err
	}
	data, err := io.ReadAll(io.LimitReader(os.Stdin, maxSpecBytes+1))
	if err == nil && len(data) == 0 {
		if ahead != nil {
			ahead.discard()
		}
		return 0
	}
	spec, err := decodeSpec(data, err)
	if err == nil {
		err = restorePriority()
	}
	if err == nil && spec.ExecutorLog != "" {
		err = redirectOutput(spec.ExecutorLog)
	}
	if err != nil {
		if ahead != nil {
			ahead.discard()
		}
		report(status, startStatus{Failure: otherFailure("", err)})
		return 1
	}
	if aheadErr != nil {
		fmt.Fprintf(os.Stderr, "standby executor: starting the namespace init ahead failed, starting it now: %v\n", aheadErr)
	}
	if err := run(spec, status, ahead); err != nil {
		fmt.Fprintf(os.Stderr, "executor: %v\n", err)
		return 1
	}
	return 0
}

// redirectOutput makes path (appended to) this process's stdout and
// stderr.
func redirectOutput(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("executor log: %w", err)
	}
	defer f.Close()
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(f.Fd()), fd, 0); err != nil {
			return fmt.Errorf("executor log: %w", err)
		}
	}
	return nil
}
