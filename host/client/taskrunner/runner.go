package taskrunner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// Driver is what a task runner needs of its task driver;
// taskdrivers.Driver implements it.
type Driver interface {
	StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error)
	WaitTask(ctx context.Context, taskID string) (*driverpb.ExitResult, error)
	StopTask(ctx context.Context, taskID string, timeout time.Duration, signal string) error
	DestroyTask(ctx context.Context, taskID string, force bool) error
	RecoverTask(ctx context.Context, handle *driverpb.TaskHandle) error
}

var (
	// ErrTaskNotRunning is returned by Restart when the task has no
	// running attempt to restart.
	ErrTaskNotRunning = errcode.New(codes.FailedPrecondition, "task is not running")
	// ErrTaskDead is returned by Restart when the task will not run again.
	ErrTaskDead = errcode.New(codes.FailedPrecondition, "task is dead")
)

// Defaults.
const (
	DefaultKillTimeout = 5 * time.Second
	DefaultHookTimeout = time.Minute
	// stopGrace is added to a task's kill_timeout to bound StopTask: the
	// driver signals, waits kill_timeout, kills, and must then answer.
	stopGrace = 30 * time.Second
	// maxEvents is how many events a task state keeps (the newest).
	maxEvents = 10
)

// Restore is what a restarted client knows of a task from its state DB.
type Restore struct {
	State *pb.TaskState
	// Handle is the persisted handle of the attempt that was running,
	// nil if none was.
	Handle *driverpb.TaskHandle
	// TaskID is the attempt the state names ("" when none).
	TaskID string
}

// Config configures one task runner.
type Config struct {
	Info runhooks.TaskInfo
	// Driver runs the task; nil with DriverErr when the driver is unknown.
	Driver    Driver
	DriverErr error
	// Hooks run after BuiltinHooks, in order.
	Hooks []runhooks.Hook

	// Ephemeral tasks (batch tasks, non-sidecar prestart and poststart
	// tasks, poststop tasks) are done when they exit 0; the others are
	// restarted whatever their exit, per the restart policy.
	Ephemeral bool
	Restart   *pb.RestartPolicy
	JobType   pb.JobType
	// MHzPerCore turns cpu_mhz into the driver's cpu_shares (1024 per
	// core); 0 passes cpu_mhz as the shares.
	MHzPerCore int64
	// HookTimeout bounds each hook call (default DefaultHookTimeout).
	HookTimeout time.Duration
	Logger      hclog.Logger
	// OnState is called with a copy of the task's state after every change,
	// with the driver task ID of the attempt starting or running ("" when
	// none), in order. It persists them and returns the error of a write
	// that failed (nil when none was needed). It must not call back into
	// the runner.
	OnState func(st *pb.TaskState, taskID string) error
	// Restore recovers a task after a client restart.
	Restore *Restore
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// TaskRunner runs one task of an alloc: its hooks, its driver calls, its
// restarts. Run it with Run; it returns when the task is dead for good or
// the runner is shut down.
type TaskRunner struct {
	cfg    Config
	logger hclog.Logger
	hooks  []runhooks.Hook

	// ctx ends with Shutdown: supervision stops, the task keeps running.
	ctx    context.Context
	cancel context.CancelFunc
	killCh chan struct{}
	// restartCh carries requested restarts (capacity 1).
	restartCh chan restartRequest
	done      chan struct{}
	// stopped is closed before done, once the task is dead: no attempt
	// will start and the last one's processes are gone; not on a Shutdown
	// that leaves the task running (stopped.go).
	stopped  chan struct{}
	restarts *restartTracker

	mu     sync.Mutex
	info   runhooks.TaskInfo
	state  *pb.TaskState
	taskID string
	// attempts are the IDs of the newest attempt and the one before,
	// kept after they end: their driver's last events about them (an
	// exit, an OOM kill) still belong to the task, and may come after the
	// next attempt started.
	attempts   [2]string
	running    bool
	killed     bool
	killReason string
	// destroyLater is the attempt whose DestroyTask Run calls after
	// closing stopped ("" when none; stopped.go).
	destroyLater string
	seq          uint64

	notifyMu sync.Mutex
	notified uint64
	// notifyErr is the error of the last OnState call (state notified).
	notifyErr error

	devents driverEvents
}

// New returns a task runner; Run starts it.
func New(cfg Config) *TaskRunner {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.HookTimeout <= 0 {
		cfg.HookTimeout = DefaultHookTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr := &TaskRunner{
		cfg:       cfg,
		logger:    cfg.Logger.With("task", cfg.Info.Task.GetName()),
		hooks:     append(BuiltinHooks(), cfg.Hooks...),
		ctx:       ctx,
		cancel:    cancel,
		killCh:    make(chan struct{}),
		restartCh: make(chan restartRequest, 1),
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
		restarts:  newRestartTracker(cfg.Restart, cfg.JobType),
		info:      cfg.Info,
		state:     &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING},
	}
	if r := cfg.Restore; r != nil && r.State != nil {
		tr.state = proto.Clone(r.State).(*pb.TaskState)
	}
	if r := cfg.Restore; r != nil {
		tr.newAttempt(r.TaskID)
		tr.newAttempt(r.Handle.GetConfig().GetId())
	}
	if r := cfg.Restore; r != nil && r.Handle == nil {
		// Until Run has the driver drop it, every record names the
		// attempt, so a client that stops meanwhile drops it next time.
		tr.taskID = r.TaskID
	}
	tr.info.Events = tr
	tr.info.Lifecycle = lifecycle{tr}
	tr.info.Driver = driverMounts{tr}
	return tr
}

// restartRequest is a restart asked for while attempt taskID runs.
type restartRequest struct {
	taskID, reason string
	// failure: the restart counts against the restart policy.
	failure bool
}

// lifecycle is the Lifecycle the runner gives its hooks.
type lifecycle struct{ tr *TaskRunner }

func (l lifecycle) Restart(taskID, reason string, failure bool) error {
	return l.tr.requestRestart(restartRequest{taskID: taskID, reason: reason, failure: failure})
}

// driverMounts is the MountsHonourer the runner gives its hooks.
type driverMounts struct{ tr *TaskRunner }

// HonoursMounts asks the driver. A task whose driver is unknown is given
// false: its start fails with a "Driver Failure" right after the prestart
// hooks, which is the error the operator must see.
func (d driverMounts) HonoursMounts(ctx context.Context) (bool, error) {
	if m, ok := d.tr.cfg.Driver.(runhooks.MountsHonourer); ok {
		return m.HonoursMounts(ctx)
	}
	return false, nil
}

// Name is the task's name.
func (tr *TaskRunner) Name() string { return tr.cfg.Info.Task.GetName() }

// State returns a copy of the task's state.
func (tr *TaskRunner) State() *pb.TaskState {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return proto.Clone(tr.state).(*pb.TaskState)
}

// dead reports whether the task's state is dead, copying nothing (Run
// asks at its start and end; State would clone every event).
func (tr *TaskRunner) dead() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return isDead(tr.state)
}

// Done is closed when Run has returned.
func (tr *TaskRunner) Done() <-chan struct{} { return tr.done }

// EmitEvent implements Emitter.
func (tr *TaskRunner) EmitEvent(ev *pb.TaskEvent) {
	tr.update(func(st *pb.TaskState) { appendEvent(st, ev) })
}

func appendEvent(st *pb.TaskState, ev *pb.TaskEvent) {
	st.Events = append(st.Events, ev)
	if n := len(st.Events); n > maxEvents {
		st.Events = append([]*pb.TaskEvent(nil), st.Events[n-maxEvents:]...)
	}
}

// event makes a task event at now.
func (tr *TaskRunner) event(typ, msg string, details map[string]string) *pb.TaskEvent {
	return &pb.TaskEvent{Type: typ, OccurredAt: tr.cfg.Now().UnixNano(), Message: msg, Details: details}
}

// update changes the state under mu and tells OnState, in order. It
// returns OnState's error; when a newer state (which holds this change)
// was told first, the error of that newer write, so a failed write-ahead
// record is never taken for a written one.
func (tr *TaskRunner) update(fn func(st *pb.TaskState)) error {
	tr.mu.Lock()
	fn(tr.state)
	tr.seq++
	seq, st, id := tr.seq, proto.Clone(tr.state).(*pb.TaskState), tr.taskID
	tr.mu.Unlock()
	if tr.cfg.OnState == nil {
		return nil
	}
	tr.notifyMu.Lock()
	defer tr.notifyMu.Unlock()
	if seq > tr.notified {
		tr.notified = seq
		tr.notifyErr = tr.cfg.OnState(st, id)
	}
	return tr.notifyErr
}

// UpdateAlloc gives the runner the alloc and job of an in-place update:
// the next start (a restart) uses them; a running attempt is not touched.
func (tr *TaskRunner) UpdateAlloc(alloc *pb.Allocation, job *pb.Job, group *pb.TaskGroup, task *pb.Task) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.info.Alloc, tr.info.Job, tr.info.Group, tr.info.Task = alloc, job, group, task
}

func (tr *TaskRunner) currentInfo() runhooks.TaskInfo {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.info
}

// Kill stops the task for good: a running attempt gets the task's
// kill_signal, then SIGKILL after its kill_timeout; a task not started is
// never started. It returns when Run has returned or ctx ends.
func (tr *TaskRunner) Kill(ctx context.Context, reason string) error {
	tr.SignalKill(reason)
	select {
	case <-tr.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("killing task %q: %w", tr.Name(), ctx.Err())
	}
}

// SignalKill is Kill without the wait: the runner kills the task (or, if
// Run has not been called, Run marks it dead at once and returns).
func (tr *TaskRunner) SignalKill(reason string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.killed {
		tr.killed, tr.killReason = true, reason
		close(tr.killCh)
	}
}

// MarkFailed marks a task that will never be started dead and failed, with
// ev (failed) as the reason; call it instead of Run.
func (tr *TaskRunner) MarkFailed(ev *pb.TaskEvent) {
	ev.Failed = true
	tr.update(func(st *pb.TaskState) {
		st.State = pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD
		st.Failed = true
		st.FinishedAt = tr.cfg.Now().UnixNano()
		appendEvent(st, ev)
	})
}

// Restart stops the running attempt and starts the task again at once,
// without counting against its restart policy.
func (tr *TaskRunner) Restart(reason string) error {
	return tr.requestRestart(restartRequest{reason: reason})
}

// requestRestart queues a restart of the running attempt (req.taskID, or
// whichever runs when it is empty).
func (tr *TaskRunner) requestRestart(req restartRequest) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.killed || tr.state.GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		return fmt.Errorf("restart task %q: %w", tr.Name(), ErrTaskDead)
	}
	if !tr.running || (req.taskID != "" && req.taskID != tr.taskID) {
		return fmt.Errorf("restart task %q attempt %q (running: %q): %w", tr.Name(), req.taskID, tr.taskID, ErrTaskNotRunning)
	}
	req.taskID = tr.taskID
	// Senders hold mu, so the channel only empties meanwhile: a request
	// left for an attempt that has ended is replaced, one for this
	// attempt stands (a restart is already asked for).
	select {
	case tr.restartCh <- req:
		return nil
	default:
	}
	select {
	case old := <-tr.restartCh:
		if old.taskID == req.taskID {
			req = old
		}
	default:
	}
	tr.restartCh <- req
	return nil
}

// Shutdown stops supervising the task without stopping it (the client is
// stopping; the next client recovers it) and waits for Run to return.
func (tr *TaskRunner) Shutdown() {
	tr.cancel()
	<-tr.done
	tr.stopDriverEvents()
}

// isDead reports whether the state says the task will not run again.
func isDead(st *pb.TaskState) bool {
	return st.GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD
}

// Run runs the task until it is dead for good, it is killed, or Shutdown.
func (tr *TaskRunner) Run() {
	// In this order: stopped closed (if the task is dead), the deferred
	// DestroyTask, done closed (stopped.go).
	defer close(tr.done)
	defer tr.destroyDeferred()
	defer tr.closeStopped()
	if tr.dead() {
		// Dead before this Run: the finished hooks of the run that saw it
		// die may not have run (the client shut down at the moment the
		// task died), so they run again here; they are idempotent.
		if !tr.shuttingDown() {
			tr.runFinished()
			tr.destroyRestoredAttempt()
		}
		return
	}
	defer func() {
		if tr.dead() && !tr.shuttingDown() {
			tr.runFinished()
		}
	}()
	if r := tr.cfg.Restore; r != nil && r.Handle != nil {
		if tr.recover(r.Handle) {
			return
		}
	} else if r != nil && r.TaskID != "" {
		if tr.settleUnhandled(r) {
			return
		}
	}
	for attempt := 1; ; attempt++ {
		if tr.shuttingDown() {
			return // the state stays as it is for the next client
		}
		if tr.killedNow() {
			tr.finishKilled()
			return
		}
		id, err := tr.start(attempt)
		if tr.shuttingDown() {
			return
		}
		if err != nil {
			// The task event says it too; the log is where an operator
			// of the node looks first.
			tr.logger.Error("task failed to start", "attempt", attempt, "error", err,
				"unrecoverable", runhooks.IsUnrecoverable(err) || errors.Is(err, sdk.ErrRequestTooLarge))
		}
		if errors.Is(err, sdk.ErrRequestTooLarge) {
			// The plugin cannot take the task at all: restarting would
			// fail the same way, for ever.
			tr.failForGood("request-too-large", err)
			return
		}
		if runhooks.IsUnrecoverable(err) {
			// A hook says no retry can fix it (a plugin socket path too
			// long for this node): the task fails now, not after its
			// restart policy's delays.
			tr.failForGood("unrecoverable", err)
			return
		}
		var res *driverpb.ExitResult
		var req *restartRequest
		if err == nil {
			res, req = tr.wait(id)
			if res == nil { // shut down
				return
			}
		}
		if tr.killedNow() {
			tr.finishKilled()
			return
		}
		if req != nil && !req.failure {
			tr.restartNow(req.reason)
			continue
		}
		if err == nil && req == nil && tr.cfg.Ephemeral && res.GetExitCode() == 0 && res.GetErr() == "" {
			tr.update(func(st *pb.TaskState) {
				st.State = pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD
				st.FinishedAt = tr.cfg.Now().UnixNano()
			})
			return
		}
		if !tr.restartAfter() {
			return
		}
	}
}

func (tr *TaskRunner) shuttingDown() bool { return tr.ctx.Err() != nil }

// failForGood marks the task dead and failed, whatever its restart
// policy, with a final event saying why.
func (tr *TaskRunner) failForGood(reason string, err error) {
	tr.update(func(st *pb.TaskState) {
		st.State = pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD
		st.Failed = true
		st.FinishedAt = tr.cfg.Now().UnixNano()
		ev := tr.event("Not Restarting", "Task will not restart: "+err.Error(), map[string]string{"reason": reason})
		ev.Failed = true
		appendEvent(st, ev)
	})
}

func (tr *TaskRunner) killedNow() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.killed
}

// finishKilled marks a killed task dead.
func (tr *TaskRunner) finishKilled() {
	tr.update(func(st *pb.TaskState) {
		st.State = pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD
		if st.FinishedAt == 0 {
			st.FinishedAt = tr.cfg.Now().UnixNano()
		}
	})
}

// restartNow records an uncounted restart (asked for, not a failure): the
// task starts again at once.
func (tr *TaskRunner) restartNow(reason string) {
	tr.update(func(st *pb.TaskState) {
		st.Restarts++
		st.LastRestartAt = tr.cfg.Now().UnixNano()
		st.State = pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING
		appendEvent(st, tr.event("Restarting", "Task restarting: "+reason,
			map[string]string{"restart_in_ms": "0", "reason": reason}))
	})
}

// restartAfter applies the restart policy after a failed start or an
// exit, waits the delay and reports whether to start again.
func (tr *TaskRunner) restartAfter() bool {
	d := tr.restarts.next(tr.cfg.Now())
	if !d.restart {
		tr.update(func(st *pb.TaskState) {
			st.State = pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD
			st.Failed = true
			st.FinishedAt = tr.cfg.Now().UnixNano()
			ev := tr.event("Not Restarting", "Task will not restart: "+d.reason, map[string]string{"reason": d.reason})
			ev.Failed = true
			appendEvent(st, ev)
		})
		return false
	}
	tr.update(func(st *pb.TaskState) {
		st.State = pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING
		appendEvent(st, tr.event("Restarting", fmt.Sprintf("Task restarting in %s (%s)", d.delay, d.reason),
			map[string]string{"restart_in_ms": strconv.FormatInt(d.delay.Milliseconds(), 10), "reason": d.reason}))
	})
	t := time.NewTimer(d.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-tr.killCh:
		tr.finishKilled()
		return false
	case <-tr.ctx.Done():
		return false
	}
	tr.update(func(st *pb.TaskState) {
		st.Restarts++
		st.LastRestartAt = tr.cfg.Now().UnixNano()
	})
	return true
}

// newTaskID returns a driver task ID unique per start attempt:
// "<alloc>.<task>.<random>", with characters a task ID may not hold
// replaced by '_'.
func newTaskID(allocID, task string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	clean := func(s string, n int) string {
		out := []byte(s)
		for i, c := range out {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				out[i] = '_'
			}
		}
		if len(out) > n {
			out = out[:n]
		}
		return string(out)
	}
	return clean(allocID, 40) + "." + clean(task, 70) + "." + hex.EncodeToString(b[:])
}

// hookCtx bounds one hook call.
func (tr *TaskRunner) hookCtx(h runhooks.Hook) (context.Context, context.CancelFunc) {
	d := tr.cfg.HookTimeout
	if t, ok := h.(runhooks.Timeouter); ok && t.Timeout() > 0 {
		d = t.Timeout()
	}
	return context.WithTimeout(tr.ctx, d)
}

// prestart runs the prestart hooks in order and returns the merged
// response; the first error stops them.
func (tr *TaskRunner) prestart(info runhooks.TaskInfo, attempt int, recovered bool) (*runhooks.PrestartResponse, error) {
	merged := &runhooks.PrestartResponse{Env: map[string]string{}, Vars: map[string]string{}}
	for _, h := range tr.hooks {
		ph, ok := h.(runhooks.PrestartHook)
		if !ok {
			continue
		}
		req := &runhooks.PrestartRequest{TaskInfo: info, Env: maps.Clone(merged.Env), Vars: maps.Clone(merged.Vars),
			Recovered: recovered, Attempt: attempt}
		var resp runhooks.PrestartResponse
		ctx, cancel := tr.hookCtx(h)
		// A kill ends a prestart hook that waits (for a volume, say).
		stop := tr.cancelOnKill(ctx, cancel)
		err := ph.Prestart(ctx, req, &resp)
		stop()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("prestart hook %s: %w", h.Name(), err)
		}
		maps.Copy(merged.Env, resp.Env)
		maps.Copy(merged.Vars, resp.Vars)
		merged.Mounts = append(merged.Mounts, resp.Mounts...)
	}
	return merged, nil
}

// cancelOnKill cancels ctx when the runner is killed, until the returned
// func is called.
func (tr *TaskRunner) cancelOnKill(ctx context.Context, cancel context.CancelFunc) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-tr.killCh:
			cancel()
		case <-ctx.Done():
		case <-done:
		}
	}()
	return func() { close(done) }
}

// poststart runs the poststart hooks in order; a failure is an event and
// a log line, the task keeps running.
func (tr *TaskRunner) poststart(info runhooks.TaskInfo, id string, recovered bool) {
	for _, h := range tr.hooks {
		ph, ok := h.(runhooks.PoststartHook)
		if !ok {
			continue
		}
		ctx, cancel := tr.hookCtx(h)
		err := ph.Poststart(ctx, &runhooks.PoststartRequest{TaskInfo: info, TaskID: id, Recovered: recovered})
		cancel()
		if err != nil {
			tr.logger.Error("poststart hook failed", "hook", h.Name(), "error", err)
			tr.EmitEvent(tr.event("Hook Failed", fmt.Sprintf("poststart hook %s: %v", h.Name(), err), map[string]string{"hook": h.Name()}))
		}
	}
}

// reverse runs fn on the hooks in reverse registration order.
func (tr *TaskRunner) reverse(fn func(runhooks.Hook)) {
	for i := len(tr.hooks) - 1; i >= 0; i-- {
		fn(tr.hooks[i])
	}
}

// teardownErr logs a failed stop, exited, finished or destroy hook;
// teardown goes on.
func (tr *TaskRunner) teardownErr(phase string, h runhooks.Hook, err error) {
	if err != nil {
		tr.logger.Error(phase+" hook failed", "hook", h.Name(), "error", err)
		tr.EmitEvent(tr.event("Hook Failed", fmt.Sprintf("%s hook %s: %v", phase, h.Name(), err), map[string]string{"hook": h.Name()}))
	}
}
