package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// execSocket, in an isolated task's state directory, is where its init
// takes commands to run inside the task (ExecIn). The state directory is
// masked in the task, so only the host reaches it.
const execSocket = "exec.sock"

// maxExecOutput caps each output stream of a command run by ExecIn.
const maxExecOutput = 1 << 20

// execDrainTimeout bounds the wait for a command's output to end after it
// exited (a background child of it may hold the pipes open).
const execDrainTimeout = time.Second

type execRequest struct {
	Args         []string `json:"args"`
	TimeoutNanos int64    `json:"timeout_nanos"`
}

// ExecOutput is what a command run by ExecIn printed and how it ended.
type ExecOutput struct {
	Stdout []byte `json:"stdout"`
	Stderr []byte `json:"stderr"`
	Exit   Exit   `json:"exit"`
}

// ExecIn runs args inside the isolated task whose executor keeps its state
// in stateDir: in the task's namespaces and root, as its user, with its
// environment, working directory and capability limits, in a process group
// killed as a whole at the timeout (0: none). The result says how the
// command ended; an error means it could not be run at all.
func ExecIn(ctx context.Context, stateDir string, args []string, timeout time.Duration) (*ExecOutput, error) {
	if len(args) == 0 {
		return nil, errors.New("exec: no command given")
	}
	// A socket path is limited to 108 bytes, and a task's state directory
	// can be longer: reach it through a descriptor of the directory.
	dir, err := unix.Open(stateDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("exec: state dir: %w", err)
	}
	defer unix.Close(dir)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir, execSocket))
	if err != nil {
		return nil, fmt.Errorf("exec: reach the task's init: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := json.NewEncoder(conn).Encode(execRequest{Args: args, TimeoutNanos: int64(timeout)}); err != nil {
		return nil, fmt.Errorf("exec: send: %w", err)
	}
	var out ExecOutput
	if err := json.NewDecoder(io.LimitReader(conn, 4*maxExecOutput)).Decode(&out); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("exec: read result: %w", err)
	}
	return &out, nil
}

// forkRequest asks the init's main loop, the thread that holds the task's
// capability limits, to start a command.
type forkRequest struct {
	args           []string
	stdout, stderr *os.File
	reply          chan forkReply
}

type forkReply struct {
	pid    int
	exited <-chan syscall.WaitStatus
	err    error
}

// listenExec creates the exec socket in stateDir; it must run before the
// init leaves the host's tree. It binds by a relative name, as the full
// path may be too long for a socket address.
func listenExec(stateDir string) (net.Listener, error) {
	if err := unix.Chdir(stateDir); err != nil {
		return nil, err
	}
	os.Remove(execSocket) // left by an earlier start of this task
	l, err := net.Listen("unix", execSocket)
	if err != nil {
		return nil, fmt.Errorf("exec socket in %s: %w", stateDir, err)
	}
	return l, nil
}

// serveExec accepts commands until the init exits.
func serveExec(l net.Listener, forks chan<- forkRequest) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go handleExec(conn, forks)
	}
}

// handleExec runs one command for a connection and answers with its
// output and exit.
func handleExec(conn net.Conn, forks chan<- forkRequest) {
	defer conn.Close()
	var req execRequest
	if err := json.NewDecoder(io.LimitReader(conn, maxSpecBytes)).Decode(&req); err != nil || len(req.Args) == 0 {
		return
	}
	answer := func(out ExecOutput) {
		out.Exit.FinishedAt = time.Now().UnixNano()
		json.NewEncoder(conn).Encode(out)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		answer(ExecOutput{Exit: Exit{ExitCode: -1, Err: err.Error()}})
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		answer(ExecOutput{Exit: Exit{ExitCode: -1, Err: err.Error()}})
		return
	}
	reply := make(chan forkReply, 1)
	forks <- forkRequest{args: req.Args, stdout: outW, stderr: errW, reply: reply}
	r := <-reply
	outW.Close()
	errW.Close()
	if r.err != nil {
		outR.Close()
		errR.Close()
		answer(ExecOutput{Exit: Exit{ExitCode: -1, Err: r.err.Error()}})
		return
	}
	var stdout, stderr cappedBuffer
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); io.Copy(&stdout, outR) }()
	go func() { defer copies.Done(); io.Copy(&stderr, errR) }()

	var timeout <-chan time.Time
	if req.TimeoutNanos > 0 {
		t := time.NewTimer(time.Duration(req.TimeoutNanos))
		defer t.Stop()
		timeout = t.C
	}
	timedOut := false
	var ws syscall.WaitStatus
	select {
	case ws = <-r.exited:
	case <-timeout:
		timedOut = true
		syscall.Kill(-r.pid, syscall.SIGKILL)
		ws = <-r.exited
	}
	// What the command left running in its group ends with it.
	syscall.Kill(-r.pid, syscall.SIGKILL)
	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(execDrainTimeout):
		outR.Close()
		errR.Close()
		<-drained
	}
	outR.Close()
	errR.Close()
	exit := exitFromWait(ws)
	if timedOut {
		exit.Err = "exec timed out after " + time.Duration(req.TimeoutNanos).String()
	}
	answer(ExecOutput{Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes(), Exit: exit})
}

// cappedBuffer keeps the first maxExecOutput bytes written to it and
// discards the rest, so a chatty command cannot block on a full pipe.
type cappedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := maxExecOutput - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// forkExec starts a command for ExecIn from the init's main loop, with the
// task's environment, working directory and user; exits of the returned
// PIDs are delivered on the channel registered in execs.
func forkExec(req forkRequest, spec *Spec, dir string, devNull *os.File, execs map[int]chan syscall.WaitStatus) forkReply {
	path, serr := LookPath(req.args[0], dir, envValue(spec.Env, "PATH"))
	if serr != nil {
		return forkReply{err: serr}
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   spec.Env,
		Files: []uintptr{devNull.Fd(), req.stdout.Fd(), req.stderr.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	if c := spec.Credential; c != nil {
		attr.Sys.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: c.Groups}
	}
	pid, err := syscall.ForkExec(path, req.args, attr)
	if err != nil {
		resolved := *spec
		resolved.Path, resolved.Dir = path, dir
		return forkReply{err: classifyStart(&resolved, err)}
	}
	exited := make(chan syscall.WaitStatus, 1)
	execs[pid] = exited
	return forkReply{pid: pid, exited: exited}
}
