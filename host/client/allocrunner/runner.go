package allocrunner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/internal/allocdir"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/taskenv"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// Drivers finds a task's driver; the client adapts taskdrivers.Manager.
type Drivers interface {
	Driver(name string) (taskrunner.Driver, error)
}

// Store persists what a restarted client needs to recover the alloc; the
// client state DB (host/client/state) implements it.
type Store interface {
	PutAlloc(*pb.AllocRecord) error
	PutTaskState(*pb.TaskStateRecord) error
	DeleteAlloc(id string) error
}

var (
	// ErrUnknownTask is returned by Restart for a task the alloc does not have.
	ErrUnknownTask = errcode.New(codes.NotFound, "no such task in the alloc")
	// ErrTaskRequired is returned by DefaultTask for an alloc of several
	// tasks and no leader.
	ErrTaskRequired = errcode.New(codes.InvalidArgument, "the alloc has several tasks: name one")
	// ErrShutDown is returned by Destroy when the runner was shut down
	// (the client is stopping) before the alloc's tasks were dead.
	ErrShutDown = errcode.New(codes.Unavailable, "alloc runner shut down")
	// ErrNoGroup is returned by New when the alloc's group is not in its job.
	ErrNoGroup = errcode.New(codes.InvalidArgument, "the alloc's group is not in its job")
)

// Config configures one alloc runner.
type Config struct {
	Alloc   *pb.Allocation
	Job     *pb.Job
	DataDir string
	Node    taskenv.Node
	// MHzPerCore: see taskrunner.Config.
	MHzPerCore int64
	Drivers    Drivers
	Store      Store
	Hooks      Hooks
	// OnUpdate receives the alloc's status after every change, to report
	// to the servers. It must not block for long nor call back.
	OnUpdate    func(*pb.AllocClientUpdate)
	HookTimeout time.Duration
	Logger      hclog.Logger
	// Restore holds, per task name, what the state DB knew of the task
	// before a client restart; nil for a new alloc.
	Restore map[string]*taskrunner.Restore
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// role is where a task runs in the alloc's lifecycle.
type role int

const (
	rolePrestart role = iota
	rolePrestartSidecar
	roleMain
	rolePoststart
	rolePoststartSidecar
	rolePoststop
)

func roleOf(t *pb.Task) role {
	lc := t.GetLifecycle()
	switch lc.GetHook() {
	case pb.TaskHook_TASK_HOOK_PRESTART:
		if lc.GetSidecar() {
			return rolePrestartSidecar
		}
		return rolePrestart
	case pb.TaskHook_TASK_HOOK_POSTSTART:
		if lc.GetSidecar() {
			return rolePoststartSidecar
		}
		return rolePoststart
	case pb.TaskHook_TASK_HOOK_POSTSTOP:
		return rolePoststop
	}
	return roleMain
}

// task is one task runner and what the alloc runner knows of it.
type task struct {
	tr      *taskrunner.TaskRunner
	role    role
	leader  bool
	started bool
}

// AllocRunner runs one alloc: its hooks and a task runner per task, in
// lifecycle order.
type AllocRunner struct {
	cfg    Config
	logger hclog.Logger
	dir    *allocdir.AllocDir
	hooks  []runhooks.Hook
	tasks  map[string]*task
	order  []string // task names in job order

	ctx     context.Context
	cancel  context.CancelFunc
	killCh  chan struct{}
	changed chan struct{}
	// updateCh wakes updateLoop (capacity 1).
	updateCh chan struct{}
	done     chan struct{}
	// tasksDone is closed when every task is dead for good and Postrun
	// begins (before done, which waits for Postrun's hooks).
	tasksDone chan struct{}
	killOnce  sync.Once

	mu    sync.Mutex
	alloc *pb.Allocation
	job   *pb.Job
	// killReason says why the alloc is killed (set before killCh closes).
	killReason string
	states     map[string]*pb.TaskState
	// persisted is the last task state record written per task, without
	// its events (see taskChanged).
	persisted map[string]*pb.TaskStateRecord
	status    pb.AllocClientStatus
	desc      string
	destroyed bool
	// recordErr is why a new alloc's record could not be written: the
	// alloc does not run (Run fails it) and none of its task states is
	// written.
	recordErr error
	// unsaved holds, per task, the newest task state record whose write
	// failed, and allocUnsaved tells that the alloc record's did: saveLoop
	// writes them again until they are written.
	unsaved      map[string]*pb.TaskStateRecord
	allocUnsaved bool
	saving       bool

	// writeMu orders the state DB writes of the runner (taskChanged,
	// persistAlloc, saveLoop), so an older record never replaces a newer.
	writeMu sync.Mutex
}

// New builds an alloc runner and its task runners; Run starts it.
func New(cfg Config) (*AllocRunner, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.HookTimeout <= 0 {
		cfg.HookTimeout = taskrunner.DefaultHookTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	group := findGroup(cfg.Job, cfg.Alloc.GetTaskGroup())
	if group == nil {
		return nil, fmt.Errorf("alloc %s: group %q of job %q version %d: %w", cfg.Alloc.GetId(),
			cfg.Alloc.GetTaskGroup(), cfg.Job.GetId(), cfg.Job.GetVersion(), ErrNoGroup)
	}
	dir, err := allocdir.New(cfg.DataDir, cfg.Alloc.GetId())
	if err != nil {
		return nil, fmt.Errorf("alloc %s: %w", cfg.Alloc.GetId(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ar := &AllocRunner{
		cfg:       cfg,
		logger:    cfg.Logger.With("alloc_id", cfg.Alloc.GetId()),
		dir:       dir,
		tasks:     map[string]*task{},
		ctx:       ctx,
		cancel:    cancel,
		killCh:    make(chan struct{}),
		changed:   make(chan struct{}, 1),
		updateCh:  make(chan struct{}, 1),
		done:      make(chan struct{}),
		tasksDone: make(chan struct{}),
		alloc:     cfg.Alloc,
		job:       cfg.Job,
		states:    map[string]*pb.TaskState{},
		status:    pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING,
		// Empty: each task's first change is written.
		persisted: map[string]*pb.TaskStateRecord{},
		unsaved:   map[string]*pb.TaskStateRecord{},
	}
	if cfg.Restore == nil && cfg.Store != nil {
		// Before any task state: no task state is ever persisted for an
		// alloc the DB does not know, and no task of it starts (Run).
		rec := &pb.AllocRecord{Alloc: cfg.Alloc, Job: cfg.Job, UpdatedAt: cfg.Now().UnixNano()}
		if err := cfg.Store.PutAlloc(rec); err != nil {
			ar.logger.Error("recording the alloc; it does not run", "error", err)
			ar.recordErr = fmt.Errorf("recording the alloc in the client state db: %w", err)
		}
	}
	info := ar.info()
	ar.hooks = []runhooks.Hook{allocDirHook{}}
	for _, f := range cfg.Hooks.Alloc {
		if h := f(info); h != nil {
			ar.hooks = append(ar.hooks, h)
		}
	}
	for _, t := range group.GetTasks() {
		if err := ar.addTask(info, group, t); err != nil {
			cancel()
			return nil, err
		}
	}
	return ar, nil
}

func findGroup(job *pb.Job, name string) *pb.TaskGroup {
	for _, g := range job.GetGroups() {
		if g.GetName() == name {
			return g
		}
	}
	return nil
}

func (ar *AllocRunner) addTask(info runhooks.AllocInfo, group *pb.TaskGroup, t *pb.Task) error {
	name := t.GetName()
	td, err := ar.dir.TaskDir(name)
	if err != nil {
		return fmt.Errorf("alloc %s: %w", ar.cfg.Alloc.GetId(), err)
	}
	var hooks []runhooks.Hook
	for _, f := range ar.cfg.Hooks.Task {
		if h := f(info, t); h != nil {
			hooks = append(hooks, h)
		}
	}
	var drv taskrunner.Driver
	var drvErr error
	if ar.cfg.Drivers != nil {
		drv, drvErr = ar.cfg.Drivers.Driver(t.GetDriver())
	} else {
		drvErr = errors.New("the client has no task drivers")
	}
	if drvErr != nil {
		drv = nil
	}
	r := roleOf(t)
	restore := ar.cfg.Restore[name]
	tr := taskrunner.New(taskrunner.Config{
		Info:   runhooks.TaskInfo{Alloc: info.Alloc, Job: info.Job, Group: group, Task: t, Node: ar.cfg.Node, Dir: td},
		Driver: drv, DriverErr: drvErr, Hooks: hooks,
		Ephemeral: r == rolePrestart || r == rolePoststart || r == rolePoststop ||
			(info.Job.GetType() == pb.JobType_JOB_TYPE_BATCH && (r == roleMain)),
		Restart: group.GetRestart(), JobType: info.Job.GetType(), MHzPerCore: ar.cfg.MHzPerCore,
		HookTimeout: ar.cfg.HookTimeout, Logger: ar.logger, Restore: restore, Now: ar.cfg.Now,
		OnState: func(st *pb.TaskState, taskID string) error { return ar.taskChanged(name, t.GetDriver(), st, taskID) },
	})
	ar.tasks[name] = &task{tr: tr, role: r, leader: t.GetLeader()}
	ar.order = append(ar.order, name)
	ar.states[name] = tr.State()
	if restore == nil {
		tr.EmitEvent(&pb.TaskEvent{Type: "Received", OccurredAt: ar.cfg.Now().UnixNano(), Message: "Task received by client"})
	}
	return nil
}

func (ar *AllocRunner) info() runhooks.AllocInfo {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return runhooks.AllocInfo{Alloc: ar.alloc, Job: ar.job, Group: findGroup(ar.job, ar.alloc.GetTaskGroup()), Node: ar.cfg.Node, Dir: ar.dir,
		Events: allocEvents{ar}}
}

// allocEvents records an alloc hook's event on every task.
type allocEvents struct{ ar *AllocRunner }

func (e allocEvents) EmitEvent(ev *pb.TaskEvent) {
	for _, name := range e.ar.order {
		e.ar.tasks[name].tr.EmitEvent(proto.Clone(ev).(*pb.TaskEvent))
	}
}

// ID is the alloc's ID.
func (ar *AllocRunner) ID() string { return ar.cfg.Alloc.GetId() }

// Alloc returns the alloc as last received.
func (ar *AllocRunner) Alloc() *pb.Allocation {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return ar.alloc
}

// Job returns the job version the alloc runs, as last received.
func (ar *AllocRunner) Job() *pb.Job {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return ar.job
}

// Dir is the alloc's directory tree.
func (ar *AllocRunner) Dir() *allocdir.AllocDir { return ar.dir }

// DefaultTask is the task a request that names none is about: the
// alloc's only task, or its leader; ErrTaskRequired when it has several
// and no leader.
func (ar *AllocRunner) DefaultTask() (string, error) {
	if len(ar.order) == 1 {
		return ar.order[0], nil
	}
	for _, name := range ar.order {
		if ar.tasks[name].leader {
			return name, nil
		}
	}
	return "", fmt.Errorf("alloc %s has tasks %v: %w", ar.ID(), ar.order, ErrTaskRequired)
}

// HasTask reports whether the alloc has a task of that name.
func (ar *AllocRunner) HasTask(name string) bool { return ar.tasks[name] != nil }

// Done is closed when the alloc's tasks are all dead, Postrun ran and
// every task runner's DestroyTask returned, or the runner was shut down.
func (ar *AllocRunner) Done() <-chan struct{} { return ar.done }

// TasksDone is closed once the alloc's tasks are all dead for good and
// its Postrun begins: from then on nothing of the alloc uses its volumes
// but the hooks tearing them down. Unlike Done it is not closed by a
// Shutdown, which leaves the tasks running for the next client.
func (ar *AllocRunner) TasksDone() <-chan struct{} { return ar.tasksDone }

// TaskLifecycle returns the named task's lifecycle state, copying nothing:
// followers of a task's log ask it several times a second.
func (ar *AllocRunner) TaskLifecycle(name string) pb.TaskLifecycleState {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return ar.states[name].GetState()
}

// TaskStates returns a copy of every task's state.
func (ar *AllocRunner) TaskStates() map[string]*pb.TaskState {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	out := make(map[string]*pb.TaskState, len(ar.states))
	for k, v := range ar.states {
		out[k] = proto.Clone(v).(*pb.TaskState)
	}
	return out
}

// sharedTaskStates returns the task states without copying them, for
// reading only: a stored state is never changed, only replaced
// (taskChanged stores the copy its task runner made, and report sends
// these same values). The alloc's own waits read them on every change
// of any task; a deep copy each time was 3% of the node simulator's CPU
// while 10,000 allocs started.
func (ar *AllocRunner) sharedTaskStates() map[string]*pb.TaskState {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return maps.Clone(ar.states)
}

// ClientStatus returns the alloc's status as the client reports it.
func (ar *AllocRunner) ClientStatus() (pb.AllocClientStatus, string) {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return ar.status, ar.desc
}

// Update takes a new version of the alloc from the servers: a stop kills
// the alloc's tasks (each with its kill_timeout); anything else is an
// in-place update, given to the update hooks and to the task runners for
// their next start.
func (ar *AllocRunner) Update(alloc *pb.Allocation, job *pb.Job) {
	if job == nil || findGroup(job, alloc.GetTaskGroup()) == nil {
		ar.mu.Lock()
		job = ar.job
		ar.mu.Unlock()
	}
	ar.mu.Lock()
	ar.alloc, ar.job = alloc, job
	ar.mu.Unlock()
	ar.persistAlloc()
	if rules.AllocServerTerminal(alloc) {
		ar.logger.Info("alloc stopped by the servers", "desired", alloc.GetDesiredStatus(), "description", alloc.GetDesiredDescription())
		reason := "alloc stopped by the servers"
		if d := alloc.GetDesiredDescription(); d != "" {
			reason += ": " + d
		}
		ar.signalKill(reason)
		return
	}
	// The hooks and task runners take it in the update loop, so a slow
	// update hook does not hold up the watcher (and the other allocs).
	select {
	case ar.updateCh <- struct{}{}:
	default: // one is pending; it reads the latest alloc
	}
}

// updateLoop gives in-place updates to the update hooks and the task
// runners, the latest first, until the runner is shut down or done.
func (ar *AllocRunner) updateLoop() {
	for {
		select {
		case <-ar.updateCh:
		case <-ar.ctx.Done():
			return
		case <-ar.done:
			return
		}
		info := ar.info()
		if rules.AllocServerTerminal(info.Alloc) {
			continue
		}
		for _, h := range ar.hooks {
			if uh, ok := h.(runhooks.UpdateHook); ok {
				ctx, cancel := context.WithTimeout(ar.ctx, hookTimeout(h, ar.cfg.HookTimeout))
				if err := uh.Update(ctx, &runhooks.UpdateRequest{AllocInfo: info}); err != nil {
					ar.logger.Error("update hook failed", "hook", h.Name(), "error", err)
				}
				cancel()
			}
		}
		for _, t := range info.Group.GetTasks() {
			if tr := ar.tasks[t.GetName()]; tr != nil {
				tr.tr.UpdateAlloc(info.Alloc, info.Job, info.Group, t)
			}
		}
	}
}

func (ar *AllocRunner) signalKill(reason string) {
	ar.killOnce.Do(func() {
		ar.mu.Lock()
		ar.killReason = reason
		ar.mu.Unlock()
		close(ar.killCh)
	})
}

// stopReason says why the alloc's tasks are being killed.
func (ar *AllocRunner) stopReason() string {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	if ar.killReason == "" {
		return "alloc stopped"
	}
	return ar.killReason
}

// Kill stops the alloc's tasks (poststop tasks still run) and waits until
// the alloc is done or ctx ends.
func (ar *AllocRunner) Kill(ctx context.Context) error {
	ar.signalKill("alloc killed")
	select {
	case <-ar.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("killing alloc %s: %w", ar.ID(), ctx.Err())
	}
}

// Restart restarts one task (or, with task "", every running task) in
// place, without counting against the restart policy.
func (ar *AllocRunner) Restart(task string) error {
	if task != "" {
		t := ar.tasks[task]
		if t == nil {
			return fmt.Errorf("alloc %s: task %q: %w", ar.ID(), task, ErrUnknownTask)
		}
		return t.tr.Restart("restart requested")
	}
	var errs []error
	restarted := 0
	for _, name := range ar.order {
		err := ar.tasks[name].tr.Restart("restart requested")
		switch {
		case err == nil:
			restarted++
		case !errors.Is(err, taskrunner.ErrTaskNotRunning) && !errors.Is(err, taskrunner.ErrTaskDead):
			errs = append(errs, err)
		}
	}
	if restarted == 0 && len(errs) == 0 {
		return fmt.Errorf("alloc %s: %w: no task of it is running", ar.ID(), taskrunner.ErrTaskNotRunning)
	}
	return errors.Join(errs...)
}

// Shutdown stops supervising the alloc without stopping its tasks (the
// client is stopping; the next one recovers them).
func (ar *AllocRunner) Shutdown() {
	ar.mu.Lock()
	ar.cancel()
	var started []*task
	for _, name := range ar.order {
		if t := ar.tasks[name]; t.started {
			started = append(started, t)
		}
	}
	ar.mu.Unlock()
	for _, t := range started {
		t.tr.Shutdown()
	}
	<-ar.done
}

// Destroy kills the alloc if it still runs, runs the task and alloc
// destroy hooks (reverse order; the alloc dir goes last) and forgets the
// alloc in the state DB.
func (ar *AllocRunner) Destroy(ctx context.Context) error {
	if err := ar.Kill(ctx); err != nil {
		return err
	}
	if ar.ctx.Err() != nil {
		// Shut down before its tasks were all dead: the next client
		// recovers the alloc and destroys it then.
		return fmt.Errorf("destroying alloc %s: %w", ar.ID(), ErrShutDown)
	}
	// Under writeMu: a write under way ends before the records are
	// deleted, and none starts after.
	ar.writeMu.Lock()
	ar.mu.Lock()
	ar.destroyed = true
	ar.mu.Unlock()
	ar.writeMu.Unlock()
	for i := len(ar.order) - 1; i >= 0; i-- {
		ar.tasks[ar.order[i]].tr.Destroy(ctx)
	}
	info := ar.info()
	var errs []error
	for i := len(ar.hooks) - 1; i >= 0; i-- {
		h := ar.hooks[i]
		if dh, ok := h.(runhooks.AllocDestroyHook); ok {
			hctx, cancel := context.WithTimeout(ctx, hookTimeout(h, ar.cfg.HookTimeout))
			if err := dh.Destroy(hctx, &runhooks.AllocDestroyRequest{AllocInfo: info}); err != nil {
				errs = append(errs, fmt.Errorf("destroy hook %s: %w", h.Name(), err))
			}
			cancel()
		}
	}
	if ar.cfg.Store != nil {
		if err := ar.cfg.Store.DeleteAlloc(ar.ID()); err != nil {
			errs = append(errs, fmt.Errorf("forgetting the alloc in the state db: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroying alloc %s: %w", ar.ID(), err)
	}
	return nil
}
