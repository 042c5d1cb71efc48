package ctrdriver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// handleVersion is the version of handleState in task handles.
const handleVersion = 1

// handleState is the driver's part of a task handle: enough to find the
// container again in containerd after the plugin or the client restarts.
type handleState struct {
	Namespace   string   `json:"namespace"`
	ContainerID string   `json:"container_id"`
	Image       string   `json:"image"`
	Pid         uint32   `json:"pid"`
	StartedAt   int64    `json:"started_at"`
	FIFODir     string   `json:"fifo_dir"`
	Shared      []string `json:"shared,omitempty"` // host dirs berth made shared mount points
	// Propagating are the host dirs of all the task's propagating
	// mounts: the task is one of their users.
	Propagating []string `json:"propagating,omitempty"`
}

// uses are the shared mount points the task uses; a handle from before
// Propagating names only those berth made.
func (st handleState) uses() []string {
	if st.Propagating != nil {
		return st.Propagating
	}
	return st.Shared
}

// task is a container the driver runs.
type task struct {
	cfg    *driverpb.TaskConfig
	state  handleState
	client *client.Client // the one it was started or recovered through
	// unhold lets go of client (Driver.hold) when the task is destroyed.
	unhold func()
	ctr    client.Container
	proc   client.Task
	logs   []io.Closer
	// waitCtx lives as long as the task; stopWait ends it, and with it
	// the wait for the exit, at destroy.
	waitCtx  context.Context
	stopWait context.CancelFunc

	// releaseOnce ends the task's uses of shared mount points once,
	// however often DestroyTask is repeated.
	releaseOnce sync.Once

	mu   sync.Mutex
	exit *driverpb.ExitResult
	done chan struct{}
}

func (t *task) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, t.state.Namespace)
}

func (t *task) result() *driverpb.ExitResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exit == nil {
		return nil
	}
	return proto.Clone(t.exit).(*driverpb.ExitResult)
}

func (t *task) exited() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// watch waits for the container's exit, lets its output drain into the
// log files, works out how it ended and publishes it. A wait that fails
// (containerd restarting: the container lives on in its shim) is waited
// again, backing off; a task containerd no longer has ends with an error.
func (d *Driver) watch(t *task, exitCh <-chan client.ExitStatus) {
	id := t.cfg.GetId()
	backoff := 100 * time.Millisecond
	var st client.ExitStatus
	for {
		st = <-exitCh
		err := st.Error()
		if err == nil || t.waitCtx.Err() != nil {
			break
		}
		if errdefs.IsNotFound(errgrpc.ToNative(err)) {
			break
		}
		d.logger.Warn("waiting for the container failed; waiting again", "task_id", id, "container_id", t.state.ContainerID, "error", err, "retry_in", backoff)
		select {
		case <-time.After(backoff):
		case <-t.waitCtx.Done():
		}
		backoff = min(2*backoff, 10*time.Second)
		exitCh, _ = t.proc.Wait(t.waitCtx) // its errors come through the channel
	}
	if t.waitCtx.Err() != nil {
		return // destroyed
	}
	res := &driverpb.ExitResult{FinishedAt: time.Now().UnixNano()}
	if err := st.Error(); err != nil {
		res.Err = fmt.Sprintf("containerd lost the container's task: %v", errgrpc.ToNative(err))
	} else {
		code := st.ExitCode()
		res.ExitCode = int32(code)
		if !st.ExitTime().IsZero() {
			res.FinishedAt = st.ExitTime().UnixNano()
		}
		// containerd reports a death by signal as 128+signal, like a shell.
		if code > 128 && code < 128+32 {
			res.Signal = int32(code - 128)
		}
		if res.Signal == int32(syscall.SIGKILL) {
			res.OomKilled = d.oomKilled(t)
		}
	}
	drainIO(t.proc.IO(), drainTimeout)
	for _, c := range t.logs {
		c.Close()
	}
	t.mu.Lock()
	t.exit = res
	close(t.done)
	t.mu.Unlock()
	if res.GetOomKilled() {
		d.events.Emit(id, "OOM killed", map[string]string{"oom_killed": "true"})
	}
	ann := map[string]string{"exit_code": strconv.Itoa(int(res.GetExitCode()))}
	msg := fmt.Sprintf("task exited with code %d", res.GetExitCode())
	if res.GetSignal() != 0 {
		ann["signal"] = strconv.Itoa(int(res.GetSignal()))
		msg = fmt.Sprintf("task killed by signal %d", res.GetSignal())
	}
	if res.GetErr() != "" {
		msg += ": " + res.GetErr()
	}
	d.events.Emit(id, msg, ann)
}

// drainTimeout bounds the wait for a task's output after its exit. An
// attach to FIFOs whose writer (the shim) closed them before the attach —
// a task that ended while no plugin ran — would wait for a writer for
// ever; a child that keeps the task's stdout open would too.
const drainTimeout = 2 * time.Second

// drainIO waits up to timeout for the copy of the task's output into its
// log files to end, then cancels it and closes the FIFOs. A task loaded
// without IO (it had ended before its recovery) has none.
func drainIO(pio cio.IO, timeout time.Duration) {
	if pio == nil {
		return
	}
	drained := make(chan struct{})
	go func() {
		pio.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(timeout):
		pio.Cancel()
		<-drained
	}
	pio.Close()
}

// oomKilled reports whether the kernel's OOM killer acted in the
// container's cgroup; the cgroup outlives the process until the task is
// deleted, so its counters are still there.
func (d *Driver) oomKilled(t *task) bool {
	ctx, cancel := context.WithTimeout(t.ctx(context.Background()), probeTimeout)
	defer cancel()
	u, err := metricsOf(ctx, t.proc)
	if err != nil {
		d.logger.Warn("cannot tell whether the task was OOM killed", "task_id", t.cfg.GetId(), "error", err)
		return false
	}
	return u.oomKills > 0
}

// WaitTask implements sdk.Driver.
func (d *Driver) WaitTask(ctx context.Context, taskID string) (*driverpb.ExitResult, error) {
	t, err := d.tasks.Get(taskID)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.done:
		return t.result(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// kill sends sig to the container's process (all of its processes when
// all), ignoring a process that is already gone.
func kill(ctx context.Context, t *task, sig syscall.Signal, all bool) error {
	var opts []client.KillOpts
	if all {
		opts = append(opts, client.WithKillAll)
	}
	err := t.proc.Kill(t.ctx(ctx), sig, opts...)
	if err == nil || errdefs.IsNotFound(err) || t.exited() {
		return nil
	}
	return fmt.Errorf("signal task %q (container %s): %w", t.cfg.GetId(), t.state.ContainerID, err)
}

// StopTask implements sdk.Driver: the signal, then SIGKILL to every
// process of the container after timeout.
func (d *Driver) StopTask(ctx context.Context, taskID string, timeout time.Duration, signal string) error {
	t, err := d.tasks.Get(taskID)
	if err != nil {
		return err
	}
	sig, err := sdk.ParseSignal(signal)
	if err != nil {
		return err
	}
	if t.exited() {
		return nil
	}
	if err := kill(ctx, t, sig, false); err != nil {
		return err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-t.done:
		return nil
	case <-timer.C:
		d.events.Emit(taskID, fmt.Sprintf("task did not exit %s after %s: killing it", timeout, sdk.SignalName(sig)), nil)
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := kill(ctx, t, syscall.SIGKILL, true); err != nil {
		return err
	}
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DestroyTask implements sdk.Driver: the container's task, the container
// and its snapshot are deleted from containerd.
func (d *Driver) DestroyTask(ctx context.Context, taskID string, force bool) error {
	t, err := d.tasks.Get(taskID)
	if errors.Is(err, sdk.ErrTaskNotFound) {
		return d.destroyUnknown(ctx, taskID, force)
	}
	if !t.exited() {
		if !force {
			return fmt.Errorf("destroy %q: %w", taskID, sdk.ErrTaskRunning)
		}
		if err := kill(ctx, t, syscall.SIGKILL, true); err != nil {
			return err
		}
		select {
		case <-t.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := d.remove(ctx, t); err != nil {
		return fmt.Errorf("destroy %q: %w", taskID, err)
	}
	d.tasks.Delete(taskID)
	t.unhold()
	return nil
}

// remove deletes the exited task's containerd task, container and
// snapshot, its FIFOs, and the shared mount points berth made for it.
func (d *Driver) remove(ctx context.Context, t *task) error {
	ctx = t.ctx(ctx)
	var errs []error
	if _, err := t.proc.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete containerd task: %w", err))
	}
	if err := t.ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete container %s: %w", t.state.ContainerID, err))
	}
	t.stopWait()
	if t.state.FIFODir != "" {
		os.RemoveAll(t.state.FIFODir)
	}
	if t.cfg.GetLogDir() == "" && t.cfg.GetTaskDir() == "" {
		// Logs no task directory holds (a caller that gave none, as
		// tests do) go with the task.
		os.RemoveAll(scratchLogDir(t.cfg))
	}
	t.releaseOnce.Do(func() { errs = append(errs, d.releaseShared(t.state.uses())...) })
	return errors.Join(errs...)
}

// InspectTask implements sdk.Driver.
func (d *Driver) InspectTask(_ context.Context, taskID string) (*driverpb.TaskStatus, error) {
	t, err := d.tasks.Get(taskID)
	if err != nil {
		return nil, err
	}
	st := &driverpb.TaskStatus{
		Id: taskID, Name: t.cfg.GetName(), State: driverpb.TaskState_TASK_STATE_RUNNING,
		StartedAt: t.state.StartedAt,
		Attributes: map[string]string{
			"container_id": t.state.ContainerID, "namespace": t.state.Namespace,
			"image": t.state.Image, "pid": strconv.FormatUint(uint64(t.state.Pid), 10),
		},
	}
	if res := t.result(); res != nil {
		st.State, st.ExitResult, st.CompletedAt = driverpb.TaskState_TASK_STATE_EXITED, res, res.GetFinishedAt()
	}
	return st, nil
}

// SignalTask implements sdk.Driver.
func (d *Driver) SignalTask(ctx context.Context, taskID, signal string) error {
	t, err := d.tasks.Get(taskID)
	if err != nil {
		return err
	}
	sig, err := sdk.ParseSignal(signal)
	if err != nil {
		return err
	}
	if t.exited() {
		return fmt.Errorf("signal %q: %w", taskID, sdk.ErrTaskNotRunning)
	}
	return kill(ctx, t, sig, false)
}

// logWriters opens the task's rotating stdout and stderr files.
func logWriters(cfg *driverpb.TaskConfig) (stdout, stderr io.WriteCloser, err error) {
	dir := cfg.GetLogDir()
	switch {
	case dir != "":
	case cfg.GetTaskDir() != "":
		dir = filepath.Join(cfg.GetTaskDir(), "logs")
	default:
		dir = scratchLogDir(cfg)
	}
	name := cfg.GetName()
	if name == "" {
		name = cfg.GetId()
	}
	open := func(stream string) (io.WriteCloser, error) {
		return openLog(dir, name+"."+stream, cfg.GetLogs())
	}
	if stdout, err = open("stdout"); err != nil {
		return nil, nil, err
	}
	if stderr, err = open("stderr"); err != nil {
		stdout.Close()
		return nil, nil, err
	}
	return stdout, stderr, nil
}

// scratchLogDir is where the logs of a task without a task or log
// directory go; it is removed with the task.
func scratchLogDir(cfg *driverpb.TaskConfig) string {
	return filepath.Join(os.TempDir(), "berth-containerd-logs", cfg.GetId())
}

// attachIO wires a task's FIFOs to its log files: created for a new task,
// reopened for a recovered one.
func attachIO(cfg *driverpb.TaskConfig, fifoDir string, create bool) (cio.Creator, cio.Attach, []io.Closer, error) {
	stdout, stderr, err := logWriters(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	closers := []io.Closer{stdout, stderr}
	opts := []cio.Opt{cio.WithStreams(nil, stdout, stderr), cio.WithFIFODir(fifoDir)}
	if create {
		return cio.NewCreator(opts...), nil, closers, nil
	}
	return nil, cio.NewAttach(opts...), closers, nil
}
