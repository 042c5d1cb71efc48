package taskexec

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
)

// Flavor is what a driver adds to the shared lifecycle.
type Flavor interface {
	// Prepare validates cfg and returns what the executor runs, setting up
	// whatever the task needs beyond it (Release undoes that). Errors are
	// the sdk's (ConfigError, StartError, sentinels).
	Prepare(cfg *driverpb.TaskConfig) (*executor.Spec, error)
	// Release undoes Prepare for a task that is gone or never started. It
	// is called once the task's processes are dead, also for a task
	// recovered from a handle, and must tolerate having nothing to undo.
	Release(cfg *driverpb.TaskConfig) error
	// Exited adds what the flavor knows about how the task ended (an OOM
	// kill) to res; called once per task, when its exit is first seen.
	Exited(cfg *driverpb.TaskConfig, res *driverpb.ExitResult)
}

// Core implements a driver's task lifecycle. Create it with New.
type Core struct {
	name        string
	stateSubdir string
	flavor      Flavor
	logger      hclog.Logger
	tasks       sdk.TaskStore[*Task]
	events      sdk.EventHub

	mu sync.Mutex
	// self re-executes this binary as an executor; set on first use.
	self *executor.Command

	standby standbys
}

// New returns a Core for the driver name, keeping each task's executor
// state in "<task_dir>/<stateSubdir>/<task id>".
func New(name, stateSubdir string, flavor Flavor, logger hclog.Logger) *Core {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Core{name: name, stateSubdir: stateSubdir, flavor: flavor, logger: logger}
}

// StateDir is where the executor of the task cfg keeps its files.
func (c *Core) StateDir(cfg *driverpb.TaskConfig) string {
	return filepath.Join(cfg.GetTaskDir(), c.stateSubdir, cfg.GetId())
}

// Task is one task: its config and its executor.
type Task struct {
	cfg       *driverpb.TaskConfig
	startedAt time.Time
	// proc is nil while StartTask is still starting the executor.
	proc atomic.Pointer[executor.Process]
	// gone is closed when the driver forgets the task, ending its watcher.
	gone     chan struct{}
	goneOnce sync.Once

	resultOnce sync.Once
	res        *driverpb.ExitResult
}

func newTask(cfg *driverpb.TaskConfig, startedAt time.Time) *Task {
	return &Task{cfg: proto.Clone(cfg).(*driverpb.TaskConfig), startedAt: startedAt, gone: make(chan struct{})}
}

// Config returns the task's config; callers must not modify it.
func (t *Task) Config() *driverpb.TaskConfig { return t.cfg }

// forget stops watching the task's executor; the process is unaffected.
func (t *Task) forget() {
	t.goneOnce.Do(func() {
		if p := t.proc.Load(); p != nil {
			p.Close()
		}
		close(t.gone)
	})
}

// result is the exit of a task whose process is done, with the flavor's
// additions, worked out once.
func (c *Core) result(t *Task) *driverpb.ExitResult {
	t.resultOnce.Do(func() {
		exit, _ := t.proc.Load().Wait(context.Background())
		t.res = exit.Result()
		c.flavor.Exited(t.cfg, t.res)
	})
	return proto.Clone(t.res).(*driverpb.ExitResult)
}

// watch publishes what only the driver knows of the task's end: an OOM
// kill. The exit itself is the runner's to record (its Terminated event),
// as the start and a recovery are (Started, and the client's log).
func (c *Core) watch(t *Task) {
	proc := t.proc.Load()
	select {
	case <-proc.Done():
		if res := c.result(t); res.GetOomKilled() {
			c.events.Emit(t.cfg.GetId(), "OOM killed", map[string]string{"oom_killed": "true"})
		}
	case <-t.gone:
	}
}

// TaskEvents implements sdk.Driver.
func (c *Core) TaskEvents(ctx context.Context) iter.Seq2[*driverpb.TaskEvent, error] {
	return c.events.Subscribe(ctx)
}

// executorCommand returns how to re-execute this binary as an executor.
func (c *Core) executorCommand() (executor.Command, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.self == nil {
		cmd, err := executor.Self()
		if err != nil {
			return executor.Command{}, err
		}
		c.self = &cmd
	}
	return *c.self, nil
}

// abandonedDestroyTimeout bounds the clean-up of a start whose caller gave up.
const abandonedDestroyTimeout = 30 * time.Second

// StartTask implements sdk.Driver.
func (c *Core) StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	self, err := c.executorCommand()
	if err != nil {
		return nil, err
	}
	// Reserve the ID before preparing, so two starts of one ID cannot race
	// (nor release each other's setup).
	t := newTask(cfg, time.Now())
	if err := c.tasks.Add(cfg.GetId(), t); err != nil {
		return nil, err
	}
	spec, err := c.flavor.Prepare(t.cfg)
	if err != nil {
		c.release(t.cfg)
		c.tasks.Delete(cfg.GetId())
		return nil, fmt.Errorf("start task %q: %w", cfg.GetId(), err)
	}
	proc, err := c.startExecutor(ctx, self, *spec, c.logger.With("task_id", cfg.GetId()))
	// The next task's executor is started once this one's start is over
	// (core_standby.go), not competing with it.
	defer func() { go c.fillStandby(self, false) }()
	if err != nil {
		c.release(t.cfg)
		c.tasks.Delete(cfg.GetId())
		return nil, fmt.Errorf("start task %q: %w", cfg.GetId(), StartError(err))
	}
	t.proc.Store(proc)
	if err := ctx.Err(); err != nil {
		// The caller gave up while the executor started: it will neither
		// get nor persist the handle, so the task must not run on.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonedDestroyTimeout)
		defer cancel()
		if derr := c.DestroyTask(dctx, cfg.GetId(), true); derr != nil {
			c.logger.Error("start abandoned by its caller, and its task could not be destroyed", "task_id", cfg.GetId(), "error", derr)
		}
		return nil, fmt.Errorf("start task %q: %w", cfg.GetId(), err)
	}
	h, err := c.encodeHandle(t)
	if err != nil {
		proc.Kill()
		c.tasks.Delete(cfg.GetId())
		return nil, err
	}
	go c.watch(t)
	c.logger.Info("task started", "task_id", cfg.GetId(), "pid", proc.Pid(), "command", spec.Path)
	return h, nil
}

// release runs the flavor's Release, logging a failure: the task is gone
// either way, and its caller's error (if any) is the one to report.
func (c *Core) release(cfg *driverpb.TaskConfig) {
	if err := c.flavor.Release(cfg); err != nil {
		c.logger.Warn("task clean-up failed", "task_id", cfg.GetId(), "error", err)
	}
}

// StartError maps the executor's account of a task that did not start to
// the sdk's, which crosses the plugin wire with its reason and path; other
// errors (the executor's own) are returned as they are.
func StartError(err error) error {
	var xe *executor.StartError
	if !errors.As(err, &xe) {
		return err
	}
	reason := sdk.StartOther
	switch xe.Kind {
	case executor.StartNotFound:
		reason = sdk.StartNotFound
	case executor.StartPermissionDenied:
		reason = sdk.StartPermissionDenied
	case executor.StartBadWorkingDir:
		reason = sdk.StartBadWorkingDir
	}
	return &sdk.StartError{Reason: reason, Path: xe.Path, Detail: xe.Detail}
}

// Get returns a task that has finished starting, and its process.
func (c *Core) Get(taskID string) (*Task, *executor.Process, error) {
	t, err := c.tasks.Get(taskID)
	if err != nil {
		return nil, nil, err
	}
	proc := t.proc.Load()
	if proc == nil {
		// Its StartTask is still running; to the caller it does not exist yet.
		return nil, nil, fmt.Errorf("task %q is starting: %w", taskID, sdk.ErrTaskNotFound)
	}
	return t, proc, nil
}

// Tasks returns the configs of the tasks the driver knows, started or
// starting.
func (c *Core) Tasks() []*driverpb.TaskConfig {
	var out []*driverpb.TaskConfig
	for _, id := range c.tasks.IDs() {
		if t, err := c.tasks.Get(id); err == nil {
			out = append(out, t.cfg)
		}
	}
	return out
}

// WaitTask implements sdk.Driver.
func (c *Core) WaitTask(ctx context.Context, taskID string) (*driverpb.ExitResult, error) {
	t, proc, err := c.Get(taskID)
	if err != nil {
		return nil, err
	}
	if _, err := proc.Wait(ctx); err != nil {
		return nil, err
	}
	return c.result(t), nil
}

// Exited reports whether the task's process is done.
func Exited(p *executor.Process) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// StopTask implements sdk.Driver.
func (c *Core) StopTask(ctx context.Context, taskID string, timeout time.Duration, signal string) error {
	_, proc, err := c.Get(taskID)
	if err != nil {
		return err
	}
	sig, err := sdk.ParseSignal(signal)
	if err != nil {
		return err
	}
	if err := proc.Signal(sig); err != nil && !errors.Is(err, executor.ErrExited) {
		return fmt.Errorf("stop task %q: %w", taskID, err)
	}
	timer := time.NewTimer(max(timeout, 0))
	defer timer.Stop()
	select {
	case <-proc.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
	}
	c.logger.Info("task did not stop in time, killing it", "task_id", taskID, "signal", sdk.SignalName(sig), "timeout", timeout)
	c.events.Emit(taskID, fmt.Sprintf("task ignored %s for %s; killing it", sdk.SignalName(sig), timeout), nil)
	if err := proc.Kill(); err != nil && !errors.Is(err, executor.ErrExited) {
		return fmt.Errorf("kill task %q: %w", taskID, err)
	}
	_, err = proc.Wait(ctx)
	return err
}

// DestroyTask implements sdk.Driver.
func (c *Core) DestroyTask(ctx context.Context, taskID string, force bool) error {
	t, proc, err := c.Get(taskID)
	if errors.Is(err, sdk.ErrTaskNotFound) {
		if _, unknown := c.tasks.Get(taskID); unknown != nil && force {
			return c.destroyOrphan(taskID)
		}
		return nil
	}
	if !Exited(proc) {
		if !force {
			return fmt.Errorf("destroy task %q: %w", taskID, sdk.ErrTaskRunning)
		}
		if err := proc.Kill(); err != nil && !errors.Is(err, executor.ErrExited) {
			return fmt.Errorf("destroy task %q: %w", taskID, err)
		}
		if _, err := proc.Wait(ctx); err != nil {
			return fmt.Errorf("destroy task %q: waiting for it to die: %w", taskID, err)
		}
	}
	// The exit is read before Release takes away what it is read from.
	c.result(t)
	t.forget()
	// Release runs while the ID is still reserved: a start of the same ID
	// is refused until it returns, and then finds what Release began (a
	// background removal) already registered, to wait for.
	c.release(t.cfg)
	c.tasks.Delete(taskID)
	dir := c.StateDir(t.cfg)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("destroy task %q: %w", taskID, err)
	}
	os.Remove(filepath.Dir(dir)) // only succeeds once no task state is left
	return nil
}

// destroyOrphan kills the executor of a task this plugin does not know, as
// when an earlier plugin process died inside its StartTask: the executor
// runs in a session of its own and outlives that plugin. The executor is
// found by its state directory's name, which ends in the task's ID. The
// flavor's Release needs the task's config, which only a handle carries:
// what it would undo (a cgroup, say) is left, and a warning says so.
func (c *Core) destroyOrphan(taskID string) error {
	dirs, err := executor.FindOrphans(filepath.Join(c.stateSubdir, taskID))
	if err != nil {
		return fmt.Errorf("destroy task %q: %w", taskID, err)
	}
	for _, dir := range dirs {
		killed, err := executor.KillOrphan(dir, c.logger.With("task_id", taskID))
		if err != nil {
			return fmt.Errorf("destroy task %q: %w", taskID, err)
		}
		if killed {
			c.logger.Warn("destroyed a task no handle names; what the driver set up for it beyond its processes is left, as only its config says what that is",
				"task_id", taskID, "state_dir", dir)
		}
	}
	return nil
}

// InspectTask implements sdk.Driver.
func (c *Core) InspectTask(_ context.Context, taskID string) (*driverpb.TaskStatus, error) {
	t, proc, err := c.Get(taskID)
	if err != nil {
		return nil, err
	}
	st := &driverpb.TaskStatus{
		Id: taskID, Name: t.cfg.GetName(), State: driverpb.TaskState_TASK_STATE_RUNNING,
		StartedAt:  t.startedAt.UnixNano(),
		Attributes: map[string]string{"pid": strconv.Itoa(proc.Pid())},
	}
	if Exited(proc) {
		st.State = driverpb.TaskState_TASK_STATE_EXITED
		st.ExitResult = c.result(t)
		st.CompletedAt = st.ExitResult.GetFinishedAt()
	}
	return st, nil
}

// SignalTask implements sdk.Driver.
func (c *Core) SignalTask(_ context.Context, taskID, signal string) error {
	_, proc, err := c.Get(taskID)
	if err != nil {
		return err
	}
	sig, err := sdk.ParseSignal(signal)
	if err != nil {
		return err
	}
	if err := proc.Signal(sig); err != nil {
		if errors.Is(err, executor.ErrExited) {
			return fmt.Errorf("signal task %q: %w", taskID, sdk.ErrTaskNotRunning)
		}
		return fmt.Errorf("signal task %q: %w", taskID, err)
	}
	c.events.Emit(taskID, "sent "+sdk.SignalName(sig), map[string]string{"signal": sdk.SignalName(sig)})
	return nil
}
