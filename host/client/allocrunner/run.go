package allocrunner

import (
	"context"
	"fmt"
	"maps"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/pb"
)

// Run runs the alloc to its end (every task dead for good, Postrun done)
// or until Shutdown. See the package doc for the lifecycle order.
func (ar *AllocRunner) Run() {
	defer close(ar.done)
	// The task runners stop (taskrunner Stopped) before their driver
	// forgets their last attempt; the alloc is done once that is too.
	defer ar.waitRunnersDone()
	go ar.updateLoop()
	recovered := ar.cfg.Restore != nil
	ar.report()
	if rules.AllocServerTerminal(ar.Alloc()) {
		ar.signalKill("alloc stopped by the servers")
	}
	// A new alloc the state DB could not record does not run: a client
	// restarted would not know it, and would leave its tasks unsupervised
	// or kill them while the servers see them run.
	err := ar.recordErr
	if err == nil {
		err = ar.prerun(recovered)
	}
	if err != nil {
		if ar.ctx.Err() != nil {
			return
		}
		ar.logger.Error("alloc setup failed; no task starts", "error", err)
		var details map[string]string
		if ar.recordErr != nil {
			// As the task runner's own write-ahead failure says it.
			details = map[string]string{"reason": "state-not-persisted"}
		}
		for _, name := range ar.order {
			if st := ar.tasks[name].tr.State(); st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
				ar.tasks[name].tr.MarkFailed(&pb.TaskEvent{Type: "Setup Failure", OccurredAt: ar.cfg.Now().UnixNano(),
					Message: fmt.Sprintf("alloc %s: %v", ar.ID(), err), Details: maps.Clone(details)})
			}
		}
		ar.postrun()
		return
	}
	if !ar.lifecycle() {
		return // shut down
	}
	ar.postrun()
}

// names returns the tasks of the given roles, in job order.
func (ar *AllocRunner) names(roles ...role) []string {
	var out []string
	for _, name := range ar.order {
		for _, r := range roles {
			if ar.tasks[name].role == r {
				out = append(out, name)
			}
		}
	}
	return out
}

// lifecycle runs the tasks: prestart tasks (the non-sidecar ones to
// completion), then the main tasks, poststart tasks once the main tasks
// run, sidecars and poststart tasks stopped once the main tasks are dead,
// then poststop tasks. It returns false if the runner was shut down.
func (ar *AllocRunner) lifecycle() bool {
	prestart := ar.names(rolePrestart)
	mains := ar.names(roleMain)
	helpers := ar.names(rolePrestartSidecar, rolePoststart, rolePoststartSidecar)
	poststop := ar.names(rolePoststop)

	ar.start(ar.names(rolePrestart, rolePrestartSidecar)...)
	res := ar.waitUntil(func(st map[string]*pb.TaskState) bool {
		return allDead(st, prestart) || anyFailed(st, prestart)
	})
	if res == shutDown {
		return false
	}
	failed := anyFailed(ar.sharedTaskStates(), prestart)
	if res == running && !failed {
		ar.start(mains...)
		res = ar.waitUntil(func(st map[string]*pb.TaskState) bool {
			for _, n := range mains {
				if st[n].GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING {
					return false
				}
			}
			return true
		})
		if res == running {
			ar.start(ar.names(rolePoststart, rolePoststartSidecar)...)
		}
		if res != shutDown {
			res = ar.waitUntil(func(st map[string]*pb.TaskState) bool {
				return allDead(st, mains) || anyFailed(st, mains) || ar.leaderDead(st)
			})
		}
		if res == shutDown {
			return false
		}
		st := ar.sharedTaskStates()
		reason := ar.stopReason()
		switch {
		case res == killed:
		case ar.leaderDead(st):
			reason = "leader task exited"
		case anyFailed(st, mains):
			reason = "sibling task failed"
		}
		if !ar.killAll(mains, reason) {
			return false
		}
	}
	helperReason := "main tasks are dead"
	if res == killed {
		helperReason = ar.stopReason()
	}
	if !ar.killAll(append(prestart, helpers...), helperReason) {
		return false
	}
	ar.start(poststop...)
	if ar.waitDone(poststop) == shutDown || ar.ctx.Err() != nil {
		return false
	}
	// Tasks that never started (a failed prestart, a stop before the
	// main tasks ran) are dead, not pending.
	for _, name := range ar.order {
		if ar.markStarted(name) {
			t := ar.tasks[name]
			t.tr.SignalKill("alloc is done")
			t.tr.Run()
		}
	}
	return true
}

// markStarted records that name's runner runs (once), reporting whether
// this call did: a started runner is never run twice.
func (ar *AllocRunner) markStarted(name string) bool {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	t := ar.tasks[name]
	if t.started {
		return false
	}
	t.started = true
	return true
}

func (ar *AllocRunner) start(names ...string) {
	for _, name := range names {
		// Checked and marked under mu, so Shutdown either sees the
		// runner started (and waits for it) or this start does not happen.
		ar.mu.Lock()
		if ar.ctx.Err() != nil {
			ar.mu.Unlock()
			return
		}
		t := ar.tasks[name]
		first := !t.started
		t.started = true
		ar.mu.Unlock()
		if first {
			go t.tr.Run()
		}
	}
}

// waitResult is how a wait ended.
type waitResult int

const (
	running waitResult = iota
	killed
	shutDown
)

// waitUntil waits until cond holds over the task states, the alloc is
// killed, or the runner is shut down.
func (ar *AllocRunner) waitUntil(cond func(map[string]*pb.TaskState) bool) waitResult {
	for {
		if cond(ar.sharedTaskStates()) {
			return running
		}
		select {
		case <-ar.changed:
		case <-ar.killCh:
			return killed
		case <-ar.ctx.Done():
			return shutDown
		}
	}
}

// waitDone waits until the runners of names (those started) stopped:
// their tasks will not run again and no process of theirs runs
// (taskrunner Stopped; their driver may still be forgetting the last
// attempt, which Run's end waits for).
func (ar *AllocRunner) waitDone(names []string) waitResult {
	for _, name := range names {
		if !ar.wasStarted(name) {
			continue
		}
		select {
		case <-ar.tasks[name].tr.Stopped():
		case <-ar.ctx.Done():
			return shutDown
		}
		// Both may be ready: a shut-down runner goes no further, whatever
		// select picked (a runner shut down with its task dead is stopped).
		if ar.ctx.Err() != nil {
			return shutDown
		}
	}
	return running
}

// waitRunnersDone waits until every started task runner's Run returned
// (or the runner is shut down: Shutdown waits for each itself).
func (ar *AllocRunner) waitRunnersDone() {
	for _, name := range ar.order {
		if !ar.wasStarted(name) {
			continue
		}
		select {
		case <-ar.tasks[name].tr.Done():
		case <-ar.ctx.Done():
			return
		}
	}
}

// wasStarted reports whether the named task's runner was started.
func (ar *AllocRunner) wasStarted(name string) bool {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return ar.tasks[name].started
}

// killAll kills the started tasks of names (in parallel, each with its
// kill_timeout) and waits for them; false means shut down meanwhile.
func (ar *AllocRunner) killAll(names []string, reason string) bool {
	for _, name := range names {
		ar.mu.Lock()
		started := ar.tasks[name].started
		ar.mu.Unlock()
		if started {
			ar.tasks[name].tr.SignalKill(reason)
		}
	}
	return ar.waitDone(names) != shutDown
}

func (ar *AllocRunner) leaderDead(st map[string]*pb.TaskState) bool {
	for name, t := range ar.tasks {
		if t.leader && st[name].GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
			return true
		}
	}
	return false
}

func allDead(st map[string]*pb.TaskState, names []string) bool {
	for _, n := range names {
		if st[n].GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
			return false
		}
	}
	return true
}

func anyFailed(st map[string]*pb.TaskState, names []string) bool {
	for _, n := range names {
		if st[n].GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD && st[n].GetFailed() {
			return true
		}
	}
	return false
}

// prerun runs the prerun hooks in registration order; the first error
// stops them.
func (ar *AllocRunner) prerun(recovered bool) error {
	info := ar.info()
	for _, h := range ar.hooks {
		ph, ok := h.(runhooks.PrerunHook)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(ar.ctx, hookTimeout(h, ar.cfg.HookTimeout))
		// A stop from the servers ends a prerun hook that waits.
		go func() {
			select {
			case <-ar.killCh:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := ph.Prerun(ctx, &runhooks.PrerunRequest{AllocInfo: info, Recovered: recovered})
		cancel()
		if err != nil {
			return fmt.Errorf("prerun hook %s: %w", h.Name(), err)
		}
	}
	return nil
}

// postrun runs the postrun hooks in reverse registration order; failures
// are logged, the others still run.
func (ar *AllocRunner) postrun() {
	close(ar.tasksDone)
	info := ar.info()
	status, _ := ar.ClientStatus()
	for i := len(ar.hooks) - 1; i >= 0; i-- {
		h := ar.hooks[i]
		if ph, ok := h.(runhooks.PostrunHook); ok {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ar.ctx), hookTimeout(h, ar.cfg.HookTimeout))
			if err := ph.Postrun(ctx, &runhooks.PostrunRequest{AllocInfo: info, ClientStatus: status}); err != nil {
				ar.logger.Error("postrun hook failed", "hook", h.Name(), "error", err)
			}
			cancel()
		}
	}
}
