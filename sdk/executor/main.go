package executor

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"berth.dev/berth/sdk/logrotate"
	"berth.dev/berth/sdk/procfs"
)

// outputDrainTimeout bounds how long the executor waits for the task's
// output pipes to close after the task exited; a descendant that escaped
// the process group can hold them open forever.
const outputDrainTimeout = 2 * time.Second

// startStatus is the one message an executor sends its driver, on fd 3,
// once the task has started or failed to.
type startStatus struct {
	Task procfs.Identity `json:"task"`
	// Group is State.Group: an isolated task's own process.
	Group procfs.Identity `json:"group,omitzero"`
	// Failure is set when the task did not start.
	Failure *StartError `json:"failure,omitempty"`
}

// Requested reports whether this process was started as an executor (or
// as the namespace init of an isolated task's executor, or as a standby
// executor waiting for its spec).
func Requested() bool {
	v := os.Getenv(markerEnv)
	return v == markerValue || v == initValue || v == standbyValue || v == standbyIsolatedValue
}

// Main runs the executor: it reads the Spec from stdin, starts the task,
// reports on fd 3, supervises the task to its end and records its exit.
// It returns the executor's own exit code (0 once the exit is recorded).
func Main() int {
	switch v := os.Getenv(markerEnv); v {
	case initValue:
		return initMain()
	case standbyValue, standbyIsolatedValue:
		return standbyMain(v == standbyIsolatedValue)
	}
	// The status pipe must not leak into the task (fds inherited by a
	// process are not close-on-exec).
	syscall.CloseOnExec(3)
	status := os.NewFile(3, "status")
	spec, err := readSpec(os.Stdin)
	if err != nil {
		report(status, startStatus{Failure: otherFailure("", err)})
		return 1
	}
	if err := run(spec, status, nil); err != nil {
		fmt.Fprintf(os.Stderr, "executor: %v\n", err)
		return 1
	}
	return 0
}

func readSpec(r io.Reader) (*Spec, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxSpecBytes+1))
	return decodeSpec(data, err)
}

// decodeSpec checks and decodes a spec read (with readErr) from stdin.
func decodeSpec(data []byte, readErr error) (*Spec, error) {
	if readErr != nil {
		return nil, fmt.Errorf("read spec: %w", readErr)
	}
	if len(data) > maxSpecBytes {
		return nil, fmt.Errorf("spec larger than %d bytes", maxSpecBytes)
	}
	var spec Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	if !filepath.IsAbs(spec.StateDir) || len(spec.Args) == 0 {
		return nil, fmt.Errorf("spec needs argv and an absolute state dir")
	}
	if spec.Isolation == nil {
		if !filepath.IsAbs(spec.Path) {
			return nil, fmt.Errorf("spec needs an absolute path")
		}
		return &spec, nil
	}
	// An isolated task's program is found inside its root, by the init.
	if spec.Path == "" {
		return nil, fmt.Errorf("spec needs a program")
	}
	if err := spec.Isolation.validate(); err != nil {
		return nil, err
	}
	return &spec, nil
}

// report sends the start status; a failed start also ends the pipe.
func report(status *os.File, st startStatus) {
	data, _ := json.Marshal(st)
	status.Write(append(data, '\n'))
	if st.Failure != nil {
		status.Close()
	}
}

// fail reports a failed start and returns it as the executor's error.
func fail(status *os.File, f *StartError) error {
	report(status, startStatus{Failure: f})
	return f
}

// run starts spec's task and supervises it to its end. ahead, when not
// nil, is what a standby executor made before its spec came (its task's
// output pipes and namespace init); run uses it or, for a spec it does not
// fit, discards it.
func run(spec *Spec, status *os.File, ahead *startedAhead) error {
	// Signals meant for the agent's process group or terminal must not
	// orphan the task. Notify (not Ignore) so the task, whose signal
	// dispositions are inherited across exec, still gets default ones.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)

	// An isolated task's working directory is inside its root, which
	// only its init sees.
	if spec.Isolation == nil {
		if bad := checkWorkDir(spec.Dir); bad != nil {
			return fail(status, bad)
		}
	}
	stdout, err := logrotate.Open(spec.Stdout)
	if err != nil {
		return fail(status, otherFailure(spec.Stdout.Path(0), err))
	}
	defer stdout.Close()
	stderr, err := logrotate.Open(spec.Stderr)
	if err != nil {
		return fail(status, otherFailure(spec.Stderr.Path(0), err))
	}
	defer stderr.Close()

	var (
		pipes    taskPipes
		cmd      *exec.Cmd
		initExit <-chan *syscall.WaitStatus
		bad      *StartError
	)
	if ahead != nil && ahead.init != nil && spec.Isolation != nil && !initSees(ahead.init.cmd.Process.Pid, rootSources(spec.Isolation)) {
		fmt.Fprintln(os.Stderr, "standby executor: the namespace init started ahead does not see every mount the task's root is built from; starting a new one")
		ahead.discard()
		ahead = nil
	}
	if ahead != nil && ahead.init != nil && spec.Isolation != nil {
		pipes = ahead.pipes
		cmd, initExit, bad = ahead.init.finish(spec)
	} else {
		if ahead != nil {
			ahead.discard()
		}
		if pipes, err = newTaskPipes(); err != nil {
			return fail(status, otherFailure("", err))
		}
		cmd, initExit, bad = startTask(spec, pipes.outW, pipes.errW)
	}
	if bad != nil {
		return fail(status, bad)
	}
	outR, errR := pipes.outR, pipes.errR
	pipes.outW.Close()
	pipes.errW.Close()

	// The task cannot be reaped before Wait, so its /proc entry is there
	// even if it already exited.
	task, err := procfs.Self(cmd.Process.Pid)
	var group procfs.Identity
	if initExit != nil {
		group, _ = initChild(cmd.Process.Pid)
	}
	if err == nil {
		var self procfs.Identity
		if self, err = procfs.Self(os.Getpid()); err == nil {
			err = writeJSONAtomic(filepath.Join(spec.StateDir, stateFile),
				State{Executor: self, Task: task, StateDir: spec.StateDir, Group: group})
		}
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fail(status, &StartError{Kind: StartOther, Path: filepath.Join(spec.StateDir, stateFile),
			Detail: "record task identity: " + err.Error()})
	}
	report(status, startStatus{Task: task, Group: group})

	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); drain(stdout, outR, spec.Stdout.Name, os.Stderr) }()
	go func() { defer copies.Done(); drain(stderr, errR, spec.Stderr.Name, os.Stderr) }()

	waitErr := cmd.Wait()
	exit := Exit{ExitCode: -1}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if initExit != nil {
		// The init reports the task's own status; its own is the
		// answer only when it was killed before it could (SIGKILL).
		if w := <-initExit; w != nil {
			ws, ok = *w, true
		}
	}
	if ok {
		exit = exitFromWait(ws)
	} else if waitErr != nil {
		exit.Err = waitErr.Error()
	}
	exit.FinishedAt = time.Now().UnixNano()

	// Whatever the task left behind in its group goes with it. The group
	// ID cannot have been reused: Linux keeps a PID in use while it names
	// a process group.
	syscall.Kill(-task.Pid, syscall.SIGKILL)

	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputDrainTimeout):
		outR.Close()
		errR.Close()
	}
	err = writeJSONAtomic(filepath.Join(spec.StateDir, exitFile), exit)
	// The driver that started us (if still there) learns of the exit now
	// rather than when this process is reaped.
	status.Write([]byte("{\"exited\":true}\n"))
	status.Close()
	return err
}

// drain copies a task's output stream to its log until the stream ends.
// Unlike io.Copy it keeps reading after a failed write, dropping what
// cannot be written: a pipe nobody reads fills up and blocks the task
// forever. Failures and recoveries are noted in log (the executor's own
// log), once each rather than once per write.
func drain(dst io.Writer, src io.Reader, name string, log io.Writer) {
	buf := make([]byte, 32<<10)
	var dropped int64
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				if dropped == 0 {
					fmt.Fprintf(log, "executor: %s: dropping output: %v\n", name, werr)
				}
				dropped += int64(n)
			} else if dropped > 0 {
				fmt.Fprintf(log, "executor: %s: output resumed after dropping up to %d bytes\n", name, dropped)
				dropped = 0
			}
		}
		if rerr != nil {
			if dropped > 0 {
				fmt.Fprintf(log, "executor: %s: dropped up to %d bytes at the end of the output\n", name, dropped)
			}
			return
		}
	}
}

// startTask starts spec's program (under a namespace init when it is
// isolated) writing to stdout and stderr. initExit is nil for a task that
// is not isolated.
func startTask(spec *Spec, stdout, stderr *os.File) (cmd *exec.Cmd, initExit <-chan *syscall.WaitStatus, bad *StartError) {
	if spec.Isolation != nil {
		return startInit(spec, stdout, stderr)
	}
	cmd = &exec.Cmd{
		Path:   spec.Path,
		Args:   spec.Args,
		Env:    spec.Env,
		Dir:    spec.Dir,
		Stdout: stdout,
		Stderr: stderr,
		SysProcAttr: &syscall.SysProcAttr{
			// Its own process group, so stop and kill reach everything it
			// forks; killed if the executor dies, so no task ever runs
			// unsupervised.
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if c := spec.Credential; c != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: c.Groups}
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, classifyStart(spec, err)
	}
	return cmd, nil, nil
}
