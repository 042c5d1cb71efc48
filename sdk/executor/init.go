package executor

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// initValue is markerEnv's value in a namespace init.
const initValue = "init"

// initStatus is one line the init sends the executor on fd 4: first
// whether the task started, then (Exited) its wait status.
type initStatus struct {
	Started    bool        `json:"started,omitempty"`
	Failure    *StartError `json:"failure,omitempty"`
	Exited     bool        `json:"exited,omitempty"`
	WaitStatus uint32      `json:"wait_status,omitempty"`
}

// forwarded are the signals the init passes on to the task. Others are
// the Go runtime's (SIGURG preempts goroutines) or the init's own
// (SIGCHLD); SIGKILL and SIGSTOP cannot be caught, and a SIGKILL sent to
// the init from the host ends the whole namespace.
var forwarded = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGUSR1,
	syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGWINCH, syscall.SIGCONT, syscall.SIGTSTP,
	syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPWR, syscall.SIGXCPU, syscall.SIGXFSZ,
	syscall.SIGVTALRM, syscall.SIGABRT,
}

// isolatedCloneFlags are the namespaces an isolated task gets.
const isolatedCloneFlags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// startInit starts the namespace init for an isolated spec, puts it in its
// cgroups, sends it the spec and waits until it has started the task. The
// returned channel yields the task's wait status as the init reports it
// (nil if the init died without reporting one).
func startInit(spec *Spec, stdout, stderr *os.File) (*exec.Cmd, <-chan *syscall.WaitStatus, *StartError) {
	pre, bad := launchInit(stdout, stderr)
	if bad != nil {
		return nil, nil, bad
	}
	return pre.finish(spec)
}

// pendingInit is a namespace init started and waiting for its spec: what
// startInit does before it knows the task (a standby executor does it
// ahead of its spec; standby.go).
type pendingInit struct {
	cmd *exec.Cmd
	// specW sends the spec (fd 3 of the init); stR reads its status (fd 4).
	specW, stR *os.File
}

// launchInit starts a namespace init writing to stdout and stderr; it
// waits for its spec.
func launchInit(stdout, stderr *os.File) (*pendingInit, *StartError) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, otherFailure("", err)
	}
	defer specR.Close()
	stR, stW, err := os.Pipe()
	if err != nil {
		specW.Close()
		return nil, otherFailure("", err)
	}
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: os.Args,
		// Nothing of the agent's environment: the task's is in the spec.
		Env:        initEnv(),
		Stdout:     stdout,
		Stderr:     stderr,
		ExtraFiles: []*os.File{specR, stW},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: isolatedCloneFlags,
			// Its own group, so signals for the task reach the init,
			// which forwards them; killed with the executor, and the
			// namespace with it.
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	err = cmd.Start()
	stW.Close()
	if err != nil {
		specW.Close()
		stR.Close()
		return nil, otherFailure("/proc/self/exe", fmt.Errorf("start namespace init: %w", err))
	}
	return &pendingInit{cmd: cmd, specW: specW, stR: stR}, nil
}

// abort kills an init that will not get its spec.
func (p *pendingInit) abort() {
	p.specW.Close()
	p.cmd.Process.Kill()
	p.cmd.Wait()
	p.stR.Close()
}

// finish puts the init in spec's cgroups, sends it the spec and waits
// until it has started the task (see startInit).
func (p *pendingInit) finish(spec *Spec) (*exec.Cmd, <-chan *syscall.WaitStatus, *StartError) {
	cmd, specW, stR := p.cmd, p.specW, p.stR
	abort := func(f *StartError) (*exec.Cmd, <-chan *syscall.WaitStatus, *StartError) {
		cmd.Process.Kill()
		cmd.Wait()
		stR.Close()
		return nil, nil, f
	}
	// The init waits for its spec, so it joins the cgroups before it can
	// fork the task.
	for _, procs := range spec.Isolation.CgroupProcs {
		if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			specW.Close()
			return abort(&StartError{Kind: StartOther, Path: procs, Detail: "join cgroup: " + detail(err)})
		}
	}
	data, err := json.Marshal(spec)
	if err == nil {
		_, err = specW.Write(data)
	}
	specW.Close()
	if err != nil {
		return abort(otherFailure("", fmt.Errorf("send spec to namespace init: %w", err)))
	}
	br := bufio.NewReader(stR)
	var first initStatus
	line, err := br.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &first)
	}
	switch {
	case err != nil:
		return abort(otherFailure("", fmt.Errorf("namespace init exited before reporting (its errors are in the task's stderr log): %w", err)))
	case first.Failure != nil:
		return abort(first.Failure)
	case !first.Started:
		return abort(otherFailure("", errors.New("namespace init reported neither start nor failure")))
	}
	exited := make(chan *syscall.WaitStatus, 1)
	go func() {
		defer stR.Close()
		var st initStatus
		line, err := br.ReadBytes('\n')
		if err != nil || json.Unmarshal(line, &st) != nil || !st.Exited {
			exited <- nil
			return
		}
		ws := syscall.WaitStatus(st.WaitStatus)
		exited <- &ws
	}()
	return cmd, exited, nil
}

// initMain is the namespace init: PID 1 of the task's PID namespace. It
// reads the Spec on fd 3 and reports on fd 4.
func initMain() int {
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	specIn := os.NewFile(3, "spec")
	status := os.NewFile(4, "init-status")
	spec, err := readSpec(specIn)
	specIn.Close()
	if err == nil {
		err = restorePriority()
	}
	if err == nil && spec.Isolation == nil {
		err = errors.New("namespace init started for a spec without isolation")
	}
	if err != nil {
		sendInit(status, initStatus{Failure: otherFailure("", err)})
		return 1
	}
	ws, f := runInit(spec, status)
	if f != nil {
		sendInit(status, initStatus{Failure: f})
		return 1
	}
	sendInit(status, initStatus{Exited: true, WaitStatus: uint32(ws)})
	// Returning ends PID 1, and the kernel kills whatever the task left
	// in its namespace: a daemon it spawned does not outlive it.
	return 0
}

func sendInit(status *os.File, st initStatus) {
	data, _ := json.Marshal(st)
	status.Write(append(data, '\n'))
}

// runInit builds the task's root, starts the task and supervises it to
// its end, returning its wait status; or the reason it did not start.
func runInit(spec *Spec, status *os.File) (syscall.WaitStatus, *StartError) {
	// Capabilities and no_new_privs are per thread, and the task is forked
	// from this one.
	runtime.LockOSThread()
	iso := spec.Isolation
	var execs net.Listener
	if iso.Exec {
		l, err := listenExec(spec.StateDir)
		if err != nil {
			return 0, otherFailure(spec.StateDir, err)
		}
		defer l.Close()
		execs = l
	}
	if err := setupRoot(iso); err != nil {
		return 0, &StartError{Kind: StartOther, Path: iso.Root, Detail: "set up task root: " + err.Error()}
	}
	if iso.Hostname != "" {
		if err := unix.Sethostname([]byte(iso.Hostname)); err != nil {
			return 0, otherFailure("", fmt.Errorf("set hostname %q: %w", iso.Hostname, err))
		}
	}
	dir := cmp.Or(spec.Dir, "/")
	if bad := checkWorkDir(dir); bad != nil {
		return 0, bad
	}
	if c := spec.Credential; c != nil && !canSearch("/", c) {
		// exec would fail with EACCES and name the program; the root is
		// what the user lacks.
		return 0, &StartError{Kind: StartPermissionDenied, Path: iso.Root,
			Detail: fmt.Sprintf("the task's root is not searchable by uid %d", c.UID)}
	}
	path, serr := LookPath(spec.Path, dir, envValue(spec.Env, "PATH"))
	if serr != nil {
		return 0, serr
	}
	if err := limitCaps(iso.Caps); err != nil {
		return 0, otherFailure("", err)
	}
	if !iso.AllowNewPrivileges {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return 0, otherFailure("", fmt.Errorf("set no_new_privs: %w", err))
		}
	}
	devNull, err := os.Open("/dev/null")
	if err != nil {
		return 0, otherFailure("/dev/null", err)
	}
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwarded...)...)
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   spec.Env,
		Files: []uintptr{devNull.Fd(), 1, 2},
		// A group of its own inside the namespace: the init forwards
		// signals to the whole group, as raw_exec signals its task's.
		Sys: &syscall.SysProcAttr{Setpgid: true},
	}
	if c := spec.Credential; c != nil {
		attr.Sys.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: c.Groups}
	}
	pid, err := syscall.ForkExec(path, spec.Args, attr)
	if err != nil {
		resolved := *spec
		resolved.Path, resolved.Dir = path, dir
		return 0, classifyStart(&resolved, err)
	}
	sendInit(status, initStatus{Started: true})
	// The kernel's OOM killer must pick the task, never its init: losing
	// the init loses the task's exit status. The task was forked with
	// the default score.
	os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	forks := make(chan forkRequest)
	if execs != nil {
		go serveExec(execs, forks)
	}
	// Commands run by ExecIn, by PID, until reaped.
	running := map[int]chan syscall.WaitStatus{}
	for {
		var sig os.Signal
		select {
		case req := <-forks:
			req.reply <- forkExec(req, spec, dir, devNull, running)
			continue
		case sig = <-sigs:
		}
		if sig != syscall.SIGCHLD {
			s := sig.(syscall.Signal)
			if err := syscall.Kill(-pid, s); errors.Is(err, syscall.ESRCH) {
				syscall.Kill(pid, s) // it left its group
			}
			continue
		}
		// Reap every child: orphans of the task are re-parented to us.
		for {
			var ws syscall.WaitStatus
			wpid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || wpid <= 0 {
				break
			}
			if wpid == pid {
				return ws, nil
			}
			if exited, ok := running[wpid]; ok {
				exited <- ws
				delete(running, wpid)
			}
		}
	}
}

// canSearch reports whether the user c may search directory p by its
// mode bits (the task's user has no capabilities to bypass them).
func canSearch(p string, c *Credential) bool {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return false
	}
	switch {
	case st.Uid == c.UID:
		return st.Mode&0o100 != 0
	case st.Gid == c.GID || slices.Contains(c.Groups, st.Gid):
		return st.Mode&0o010 != 0
	}
	return st.Mode&0o001 != 0
}

// limitCaps drops every capability not in keep from this thread's
// bounding set (and its ambient set), so the task can never hold them.
func limitCaps(keep []int) error {
	data, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return fmt.Errorf("read cap_last_cap: %w", err)
	}
	last, err := strconv.Atoi(string(trimNL(data)))
	if err != nil {
		return fmt.Errorf("cap_last_cap %q: %w", data, err)
	}
	kept := map[int]bool{}
	for _, c := range keep {
		kept[c] = true
	}
	for c := 0; c <= last; c++ {
		if kept[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	return nil
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
