package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/host/client/allocrunner"
	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/internal/allocdir"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/internal/taskenv"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/taskdrivers"
)

// AllocStore is what the client keeps of its allocs in the state DB
// (host/client/state implements it).
type AllocStore interface {
	allocrunner.Store
	Allocs() ([]*pb.AllocRecord, error)
	TaskStates(allocID string) ([]*pb.TaskStateRecord, error)
	TaskHandle(taskID string) (*pb.TaskHandleRecord, bool, error)
	TaskHandles() ([]*pb.TaskHandleRecord, error)
}

// WatchMaxWait is how long one ClientAllocs.Watch blocks on the servers
// before it returns unchanged; watchSlack is what the attempt gets on top
// of it for the answer to arrive.
const (
	WatchMaxWait = 5 * time.Minute
	watchSlack   = 30 * time.Second
)

var (
	// ErrUnknownAlloc is returned by RestartAlloc and LogPaths for an
	// alloc this client does not run.
	ErrUnknownAlloc = errcode.New(codes.NotFound, "no such alloc on this client")
	// ErrNoAllocRuntime is returned by RestartAlloc and LogPaths when the
	// client was started without drivers and a state DB.
	ErrNoAllocRuntime = errcode.New(codes.FailedPrecondition, "this client runs no allocs")
)

// ManagerDrivers adapts a driver manager to the alloc runners' Drivers.
func ManagerDrivers(m *taskdrivers.Manager) allocrunner.Drivers { return managerDrivers{m} }

type managerDrivers struct{ m *taskdrivers.Manager }

func (d managerDrivers) Driver(name string) (taskrunner.Driver, error) {
	drv, err := d.m.Driver(name)
	if err != nil {
		return nil, err
	}
	return drv, nil
}

// allocRuntime holds the client's alloc runners.
type allocRuntime struct {
	mu      sync.Mutex
	runners map[string]*allocrunner.AllocRunner
	// destroying holds runners being destroyed (no longer sent by the
	// servers), so a late answer does not start them again.
	destroying map[string]bool
	// unrun holds the terminal allocs the servers send that this client
	// never ran, once their claims' teardown and their status are under
	// way (each answer sends them again until they are collected), each
	// with the cancel of its teardown's context: an alloc no longer sent
	// needs none.
	unrun   map[string]context.CancelFunc
	updater *updater
	// wg is the watcher; destroys are the destroys under way.
	wg, destroys sync.WaitGroup
	// driverEvents are the subscriptions to the drivers' task events.
	driverEvents sync.WaitGroup
}

// allocsEnabled reports whether the client runs allocs.
func (c *Client) allocsEnabled() bool { return c.cfg.TaskDrivers != nil && c.cfg.State != nil }

// startAllocs recovers the allocs in the state DB and starts the watcher.
// The order matters: the runners are built first, then the CSI plugin
// registry is restored (it asks them which allocs still run), and only
// then do the runners run, so a plugin task's supervisor hook finds the
// registry as the previous run left it.
func (c *Client) startAllocs() {
	c.allocs = &allocRuntime{runners: map[string]*allocrunner.AllocRunner{}, destroying: map[string]bool{}, unrun: map[string]context.CancelFunc{}}
	c.allocs.updater = newUpdater(c.ctx, c.logger, c.sendUpdates, func(err error) bool { return refusal(status.Code(err)) })
	c.allocs.updater.hold, c.allocs.updater.startHold, c.allocs.updater.busyStartHold = pendingHold, startingHold, busyStartingHold
	runners := c.restoreAllocs()
	c.startDriverEvents()
	c.restoreCSIRegistry()
	c.startVolumes()
	for _, r := range runners {
		go r.Run()
	}
	c.allocs.wg.Add(1)
	go func() {
		defer c.allocs.wg.Done()
		c.watchAllocs()
	}()
}

// stopAllocs stops supervising the allocs; their tasks keep running.
func (c *Client) stopAllocs() {
	if c.allocs == nil {
		return
	}
	c.allocs.wg.Wait()
	c.allocs.driverEvents.Wait()
	c.allocs.mu.Lock()
	runners := make([]*allocrunner.AllocRunner, 0, len(c.allocs.runners))
	for _, r := range c.allocs.runners {
		runners = append(runners, r)
	}
	c.allocs.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Shutdown()
		}()
	}
	wg.Wait()
	c.allocs.destroys.Wait()
}

// mhzPerCore is the node's per-core CPU frequency, 0 when unknown.
func mhzPerCore(n *pb.Node) int64 {
	fp := n.GetFingerprint()
	if fp.GetCpuCores() <= 0 {
		return 0
	}
	return fp.GetCpuTotalMhz() / int64(fp.GetCpuCores())
}

// newRunner builds an alloc runner, with the node as last registered
// (before the first registration, a recovered alloc's, as fingerprinted now).
func (c *Client) newRunner(alloc *pb.Allocation, job *pb.Job, restore map[string]*taskrunner.Restore) (*allocrunner.AllocRunner, error) {
	c.mu.Lock()
	n := c.registeredNode
	c.mu.Unlock()
	if n == nil {
		n = c.node()
	}
	return allocrunner.New(allocrunner.Config{
		Alloc: alloc, Job: job, DataDir: c.cfg.DataDir, Node: taskenv.NodeFrom(n), MHzPerCore: mhzPerCore(n),
		Drivers: c.cfg.TaskDrivers, Store: c.cfg.State, Hooks: c.cfg.Hooks,
		OnUpdate: c.allocs.updater.add, Logger: c.logger.Named("alloc"), Restore: restore,
	})
}

// restoreAllocs builds a runner for every alloc in the state DB, for the
// caller to run; running tasks are recovered through their drivers, not
// started again.
//
// A task's handle is persisted by the driver manager when the task starts,
// and the task's state (naming the handle) just after; a client killed
// between the two leaves a handle no task state names. Such a handle of a
// recovered task that has no running attempt is adopted (the newest, if
// several); any other handle of an alloc task nobody names is destroyed,
// so no task runs unsupervised.
func (c *Client) restoreAllocs() []*allocrunner.AllocRunner {
	recs, err := c.cfg.State.Allocs()
	if err != nil {
		c.logger.Error("some alloc records are unreadable; those allocs are not recovered", "error", err)
	}
	handles, err := c.cfg.State.TaskHandles()
	if err != nil {
		c.logger.Error("some task handles are unreadable; their tasks cannot be recovered", "error", err)
	}
	// unnamed holds the handles of alloc tasks, by "<alloc>/<task>",
	// until a task state names them or adopts them.
	unnamed := map[string][]*pb.TaskHandleRecord{}
	for _, h := range handles {
		cfg := h.GetHandle().GetConfig()
		if cfg.GetAllocId() == "" {
			continue // not started by an alloc runner
		}
		key := cfg.GetAllocId() + "/" + cfg.GetName()
		unnamed[key] = append(unnamed[key], h)
	}
	// pull removes from unnamed and returns the handle of key with task
	// ID id, or with id "" the newest.
	pull := func(key, id string) *pb.TaskHandleRecord {
		hs := unnamed[key]
		best := -1
		for i, h := range hs {
			switch {
			case id != "":
				if h.GetHandle().GetConfig().GetId() == id {
					best = i
				}
			case best < 0 || h.GetHandle().GetStartedAt() > hs[best].GetHandle().GetStartedAt():
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		h := hs[best]
		unnamed[key] = slices.Delete(slices.Clone(hs), best, best+1)
		return h
	}
	var runners []*allocrunner.AllocRunner
	for _, rec := range recs {
		id := rec.GetAlloc().GetId()
		states, err := c.cfg.State.TaskStates(id)
		if err != nil {
			c.logger.Error("some task states are unreadable", "alloc_id", id, "error", err)
		}
		restore := map[string]*taskrunner.Restore{}
		// took holds the handles taken for this alloc: put back (and so
		// destroyed as orphans) if it cannot be recovered, so no task of
		// it runs unsupervised.
		var took []*pb.TaskHandleRecord
		take := func(key, id string) *pb.TaskHandleRecord {
			h := pull(key, id)
			if h != nil {
				took = append(took, h)
			}
			return h
		}
		for _, ts := range states {
			r := &taskrunner.Restore{State: ts.GetState(), TaskID: ts.GetTaskId()}
			key := id + "/" + ts.GetTask()
			switch {
			case ts.GetTaskId() != "":
				if h := take(key, ts.GetTaskId()); h != nil {
					r.Handle = h.GetHandle()
				}
			case ts.GetState().GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD:
				if h := take(key, ""); h != nil {
					c.logger.Warn("adopting the handle of a task started just before the client stopped",
						"alloc_id", id, "task", ts.GetTask(), "task_id", h.GetHandle().GetConfig().GetId())
					r.Handle = h.GetHandle()
				}
			}
			restore[ts.GetTask()] = r
		}
		// A task started before its first state was written has a handle
		// and no state record at all.
		for _, t := range taskNames(rec.GetJob(), rec.GetAlloc().GetTaskGroup()) {
			if _, ok := restore[t]; ok {
				continue
			}
			if h := take(id+"/"+t, ""); h != nil {
				restore[t] = &taskrunner.Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING}, Handle: h.GetHandle()}
			}
		}
		r, err := c.newRunner(rec.GetAlloc(), rec.GetJob(), restore)
		if err != nil {
			c.logger.Error("cannot recover alloc; destroying its tasks", "alloc_id", id, "error", err)
			for _, h := range took {
				key := id + "/" + h.GetHandle().GetConfig().GetName()
				unnamed[key] = append(unnamed[key], h)
			}
			continue
		}
		c.allocs.runners[id] = r
		runners = append(runners, r)
		c.logger.Info("alloc recovered", "alloc_id", id)
	}
	for _, hs := range unnamed {
		for _, h := range hs {
			c.reapOrphan(h)
		}
	}
	return runners
}

// taskNames lists the tasks of a job's group.
func taskNames(job *pb.Job, group string) []string {
	var out []string
	for _, g := range job.GetGroups() {
		if g.GetName() == group {
			for _, t := range g.GetTasks() {
				out = append(out, t.GetName())
			}
		}
	}
	return out
}

// reapOrphan destroys (killing it) a task whose handle no recovered task
// claims: its alloc is gone, or a newer attempt replaced it.
func (c *Client) reapOrphan(h *pb.TaskHandleRecord) {
	id := h.GetHandle().GetConfig().GetId()
	d, err := c.cfg.TaskDrivers.Driver(h.GetDriver())
	if err != nil {
		c.logger.Error("cannot destroy an orphaned task: its driver is unknown", "task_id", id, "driver", h.GetDriver(), "error", err)
		return
	}
	c.logger.Warn("destroying a task no alloc claims", "task_id", id, "alloc_id", h.GetHandle().GetConfig().GetAllocId())
	c.allocs.destroys.Add(1)
	go func() {
		defer c.allocs.destroys.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), time.Minute)
		defer cancel()
		if err := d.DestroyTask(ctx, id, true); err != nil {
			c.logger.Error("destroying an orphaned task", "task_id", id, "error", err)
		}
	}()
}

// waitRegistered waits until the node is registered; false if the client
// stopped first.
func (c *Client) waitRegistered() bool {
	for {
		c.mu.Lock()
		ok, ch := c.registered, c.registeredCh
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-c.ctx.Done():
			return false
		}
	}
}

// errStaleWatch marks a watch answer from a server behind the client.
var errStaleWatch = errors.New("stale watch answer")

// staleRoundsAccepted is how many watch rounds in a row every server must
// answer behind the client before it takes their state.
const staleRoundsAccepted = 3

// watchAllocs is the alloc watcher: a blocking ClientAllocs.Watch, again
// as soon as one answers, with the allocs the client holds as known so
// unchanged ones come back as stubs. A failed call is retried after a
// capped backoff.
func (c *Client) watchAllocs() {
	if !c.waitRegistered() {
		return
	}
	// A restarted client starts from the newest change it holds: an answer
	// from a server behind it (a lagging follower, or one whose wait ran
	// out before it caught up) must not make it destroy allocs that server
	// has not heard of yet.
	var index uint64
	for _, v := range c.knownAllocs() {
		index = max(index, v)
	}
	failures := 0 // consecutive rounds without a newer answer
	staleRounds := 0
	// more: the last answer reached the servers' byte budget, so the next
	// asks at once (min index 0) for the allocs it sent as stubs.
	more := false
	for c.ctx.Err() == nil {
		minIndex := index
		if more {
			minIndex = 0
		}
		req := &pb.ClientAllocsRequest{NodeId: c.nodeID, Known: c.knownAllocs(), KnownJobs: slices.Sorted(maps.Keys(c.heldJobs())),
			Paged: true, Query: &pb.QueryOptions{MinIndex: minIndex, MaxWaitMs: c.watchMaxWait().Milliseconds()}}
		began := time.Now()
		var resp, stale *pb.ClientAllocsResponse
		err := c.callConnOn(func(int) time.Duration { return c.watchMaxWait() + watchSlack }, true,
			func(ctx context.Context, conn grpc.ClientConnInterface) (err error) {
				resp, err = pb.NewClientAllocsClient(conn).Watch(ctx, req)
				if err == nil && resp.GetMeta().GetIndex() < index {
					// The node's allocs index never goes back on a server
					// that is up to date: this one is behind what the
					// client already saw, so the next server is asked.
					stale = resp
					return status.Errorf(codes.Unavailable, "%v: index %d, behind the %d already seen",
						errStaleWatch, resp.GetMeta().GetIndex(), index)
				}
				return err
			})
		switch {
		case err == nil:
			staleRounds = 0
		case stale != nil && c.ctx.Err() == nil:
			// Every server answered behind. Once that persists, the
			// cluster's state really went back (a snapshot restore), and
			// its answer is the truth.
			if staleRounds++; staleRounds >= staleRoundsAccepted {
				c.logger.Warn("every server answers behind the allocs index this client saw; taking their state", "index", stale.GetMeta().GetIndex(), "seen", index)
				resp, err, index, staleRounds = stale, nil, 0, 0
			}
		}
		more = false
		if err == nil {
			got := resp.GetMeta().GetIndex()
			c.applyAllocs(resp)
			paging := minIndex < index // this round asked at once for the rest
			// The rest is asked for only when this page was taken in:
			// one holding only allocs this client cannot run would come
			// back the same, at once, for ever.
			more = resp.GetMore() && !maps.Equal(c.knownAllocs(), req.GetKnown())
			if more || paging || got > index || time.Since(began) >= time.Second {
				index, failures = got, 0
				continue
			}
			// An answer at once that is not newer: a server whose
			// blocking query does not block. Pace the loop.
			err = fmt.Errorf("watch answered at once with index %d, not newer than %d", got, index)
			index = got
		}
		if c.ctx.Err() != nil {
			return
		}
		failures++
		retry := serverRetry.Delay(failures)
		c.logger.Warn("watching allocs", "error", err, "retry_in", retry)
		if !backoff.Sleep(c.ctx.Done(), retry) {
			return
		}
	}
}

func (c *Client) watchMaxWait() time.Duration {
	if c.cfg.WatchMaxWait > 0 {
		return c.cfg.WatchMaxWait
	}
	return WatchMaxWait
}

// knownAllocs maps the allocs the client runs to their alloc_modify_index.
func (c *Client) knownAllocs() map[string]uint64 {
	c.allocs.mu.Lock()
	defer c.allocs.mu.Unlock()
	out := make(map[string]uint64, len(c.allocs.runners))
	for id, r := range c.allocs.runners {
		if !c.allocs.destroying[id] {
			out[id] = r.Alloc().GetAllocModifyIndex()
		}
	}
	return out
}

// heldJobs maps the job versions the client's runners hold
// ("<job id>@<version>", as the servers key them) to the job: the servers
// do not send them again.
func (c *Client) heldJobs() map[string]*pb.Job {
	c.allocs.mu.Lock()
	defer c.allocs.mu.Unlock()
	return c.heldJobsLocked()
}

func (c *Client) heldJobsLocked() map[string]*pb.Job {
	out := map[string]*pb.Job{}
	for _, r := range c.allocs.runners {
		if j := r.Job(); j != nil {
			out[jobKey(j.GetId(), j.GetVersion())] = j
		}
	}
	return out
}

func jobKey(jobID string, version uint64) string { return fmt.Sprintf("%s@%d", jobID, version) }

// isStub reports whether a Watch answer sent the alloc as a stub (ID and
// index only).
func isStub(a *pb.Allocation) bool { return a.GetJobId() == "" }

// applyAllocs reconciles the runners with the servers' view: a new alloc
// gets a runner (unless it is already terminal: see releaseUnrun), a
// changed one an update, and a runner whose alloc the servers no longer
// send is destroyed.
func (c *Client) applyAllocs(resp *pb.ClientAllocsResponse) {
	rt := c.allocs
	seen := map[string]bool{}
	var start []*allocrunner.AllocRunner
	type unrunAlloc struct {
		alloc *pb.Allocation
		ctx   context.Context
	}
	var unrun []unrunAlloc
	type update struct {
		r     *allocrunner.AllocRunner
		alloc *pb.Allocation
		job   *pb.Job
	}
	var updates []update
	rt.mu.Lock()
	held := c.heldJobsLocked()
	for _, a := range resp.GetAllocs() {
		id := a.GetId()
		seen[id] = true
		r := rt.runners[id]
		if isStub(a) || rt.destroying[id] {
			continue
		}
		key := jobKey(a.GetJobId(), a.GetJobVersion())
		job := resp.GetJobs()[key]
		if job == nil {
			job = held[key] // sent as known: another runner holds it
		}
		if r == nil {
			if rules.AllocTerminal(a) {
				// Stopped or ended before this client ran it.
				if _, ok := rt.unrun[id]; !ok {
					ctx, cancel := context.WithCancel(c.ctx)
					rt.unrun[id] = cancel
					unrun = append(unrun, unrunAlloc{a, ctx})
				}
				continue
			}
			if job == nil {
				c.logger.Error("the servers sent an alloc without its job; waiting for the next answer",
					"alloc_id", id, "job_id", a.GetJobId(), "job_version", a.GetJobVersion())
				continue
			}
			nr, err := c.newRunner(a, job, nil)
			if err != nil {
				c.logger.Error("cannot run alloc", "alloc_id", id, "error", err)
				continue
			}
			rt.runners[id] = nr
			start = append(start, nr)
			continue
		}
		if a.GetAllocModifyIndex() != r.Alloc().GetAllocModifyIndex() {
			updates = append(updates, update{r, a, job})
		}
	}
	var destroy []*allocrunner.AllocRunner
	for id, r := range rt.runners {
		if !seen[id] && !rt.destroying[id] {
			rt.destroying[id] = true
			destroy = append(destroy, r)
		}
	}
	for id, cancel := range rt.unrun {
		if !seen[id] {
			cancel()
			delete(rt.unrun, id)
		}
	}
	rt.mu.Unlock()

	for _, u := range unrun {
		c.releaseUnrun(u.ctx, u.alloc)
	}

	for _, r := range start {
		c.logger.Info("running alloc", "alloc_id", r.ID())
		go r.Run()
	}
	for _, u := range updates {
		u.r.Update(u.alloc, u.job)
	}
	for _, r := range destroy {
		c.logger.Info("destroying alloc the servers no longer send", "alloc_id", r.ID())
		rt.destroys.Add(1)
		go func() {
			defer rt.destroys.Done()
			if err := r.Destroy(context.WithoutCancel(c.ctx)); err != nil {
				c.logger.Error("destroying alloc", "alloc_id", r.ID(), "error", err)
			}
			rt.mu.Lock()
			delete(rt.runners, r.ID())
			delete(rt.destroying, r.ID())
			rt.mu.Unlock()
		}()
	}
}

// releaseUnrun lets go of an alloc the servers stopped (or that ended)
// before this client ran it: `job run` then `job stop` (or `job stop
// -purge`, which removes the job the client would read its volumes from)
// before the client fetched the alloc. Its claims were reserved on this
// node at placement and moved to releasing when it stopped; no runner, so
// no volume hook, would ever report them off the node, and the alloc
// would stay pending, never collected. Its claims are taken down through
// the volume hooks' teardown (which reports node-detached only once
// nothing of the alloc is published or, if it was the last user, staged
// on the node), and only then is a stopped alloc still pending reported
// complete: a complete alloc may be collected, and a claim still
// releasing would then be sent to no client again. ctx ends when the
// servers no longer send the alloc.
//
// An alloc whose client status is running did run here: a runner that
// could not be restored after a restart (its tasks' handles are destroyed
// by restoreAllocs). It is reported failed, not complete, once its claims
// are down. One already client-terminal (lost while its node was away) is
// only released.
func (c *Client) releaseUnrun(ctx context.Context, a *pb.Allocation) {
	c.logger.Info("releasing an alloc stopped before this client ran it", "alloc_id", a.GetId(),
		"desired_status", a.GetDesiredStatus(), "client_status", a.GetClientStatus())
	complete := func() {}
	switch {
	case rules.AllocClientTerminal(a):
	case rules.AllocServerTerminal(a) && neverReported(a):
		complete = func() {
			c.allocs.updater.add(&pb.AllocClientUpdate{AllocId: a.GetId(), ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE,
				ClientDescription: "stopped before the client ran it", UpdatedAt: time.Now().UnixNano()})
		}
	default:
		// Reported running, its runner not restored (its tasks were
		// destroyed): it ended here, failed, and must say so, or the
		// servers keep it running for good (never collected, a drain
		// never done).
		complete = func() {
			c.allocs.updater.add(&pb.AllocClientUpdate{AllocId: a.GetId(), ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED,
				ClientDescription: "its runner could not be restored after the client restarted; its tasks were destroyed", UpdatedAt: time.Now().UnixNano()})
		}
	}
	if v := c.volumes; v != nil {
		v.hooks.TearDownUnrun(ctx, claimsClient{c}, a.GetId(), a.GetModifyIndex(), complete)
		return
	}
	complete()
}

// neverReported reports whether no client status was ever reported for
// a: pending, as placed (or unset, as a server that did not set it sent).
func neverReported(a *pb.Allocation) bool {
	switch a.GetClientStatus() {
	case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_UNSPECIFIED:
		return true
	}
	return false
}

// reportAllocs queues the status of every alloc the client runs. It runs
// after each registration: a batch the servers refused (they did not know
// the node), or statuses that changed while the client was down, reach
// them this way.
func (c *Client) reportAllocs() {
	if c.allocs == nil {
		return
	}
	c.allocs.mu.Lock()
	runners := make([]*allocrunner.AllocRunner, 0, len(c.allocs.runners))
	for _, r := range c.allocs.runners {
		runners = append(runners, r)
	}
	c.allocs.mu.Unlock()
	for _, r := range runners {
		r.Report()
	}
}

// sendUpdates sends one batch of alloc status updates, once the node is
// registered: servers that do not know the node would refuse the batch.
func (c *Client) sendUpdates(_ context.Context, batch []*pb.AllocClientUpdate) error {
	if !c.waitRegistered() {
		return c.ctx.Err()
	}
	req := &pb.ClientAllocUpdateRequest{NodeId: c.nodeID, Updates: batch}
	return c.callConn(c.attemptTimeout, func(ctx context.Context, conn grpc.ClientConnInterface) error {
		_, err := pb.NewClientAllocsClient(conn).Update(ctx, req)
		return err
	})
}

func (c *Client) runner(allocID string) (*allocrunner.AllocRunner, error) {
	if c.allocs == nil {
		return nil, ErrNoAllocRuntime
	}
	c.allocs.mu.Lock()
	defer c.allocs.mu.Unlock()
	r := c.allocs.runners[allocID]
	if r == nil {
		return nil, fmt.Errorf("alloc %s on node %s: %w", allocID, c.nodeID, ErrUnknownAlloc)
	}
	return r, nil
}

// RestartAlloc restarts one task of an alloc (or, with task "", every
// running task) in place, without counting against the restart policy.
func (c *Client) RestartAlloc(allocID, task string) error {
	r, err := c.runner(allocID)
	if err != nil {
		return err
	}
	return r.Restart(task)
}

// LogPaths locates a task's log files, for `alloc logs`. An empty task
// names the alloc's only task, or its leader.
func (c *Client) LogPaths(allocID, task string) (allocdir.TaskLogs, error) {
	r, err := c.runner(allocID)
	if err != nil {
		return allocdir.TaskLogs{}, err
	}
	if task == "" {
		if task, err = r.DefaultTask(); err != nil {
			return allocdir.TaskLogs{}, err
		}
	}
	if !r.HasTask(task) {
		return allocdir.TaskLogs{}, fmt.Errorf("alloc %s: task %q: %w", allocID, task, allocrunner.ErrUnknownTask)
	}
	return r.Dir().Logs(task)
}

// LogFiles returns the paths of a task's stdout (stderr) files, oldest
// first, for ClientRPC's Logs. An empty task names the alloc's only task,
// or its leader.
func (c *Client) LogFiles(allocID, task string, stderr bool) ([]string, error) {
	logs, err := c.LogPaths(allocID, task)
	if err != nil {
		return nil, err
	}
	return logs.Files(stderr)
}

// TaskDead reports whether a task of the alloc is dead, for a followed
// log to end. An empty task names the alloc's only task, or its leader.
func (c *Client) TaskDead(allocID, task string) (bool, error) {
	r, err := c.runner(allocID)
	if err != nil {
		return false, err
	}
	if task == "" {
		if task, err = r.DefaultTask(); err != nil {
			return false, err
		}
	}
	if !r.HasTask(task) {
		return false, fmt.Errorf("alloc %s: task %q: %w", allocID, task, allocrunner.ErrUnknownTask)
	}
	return r.TaskLifecycle(task) == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD, nil
}

// AllocStates returns the client's view of an alloc: its status and task
// states.
func (c *Client) AllocStates(allocID string) (pb.AllocClientStatus, map[string]*pb.TaskState, error) {
	r, err := c.runner(allocID)
	if err != nil {
		return 0, nil, err
	}
	st, _ := r.ClientStatus()
	return st, r.TaskStates(), nil
}

var _ taskrunner.Driver = (*taskdrivers.Driver)(nil)
