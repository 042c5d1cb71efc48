package execdriver

import (
	"context"
	"slices"
	"sync"
)

// cgroupReleases runs the removals of finished tasks' cgroups in the
// background. A task's processes are gone before DestroyTask releases what
// it set up (its init reaped, and with it every process of its PID
// namespace), so its cgroup guards nothing any more: the caller's next
// step — a volume's unpublish, on a job stop — does not wait for the
// kernel to tear the cgroup down in each hierarchy, nor for the retries
// while its last process leaves it. A removal that fails is still
// reported, as a synchronous one was: logged with the task's ID. A task
// started again under the same ID waits for its old cgroup's removal
// first, so the removal cannot take the new one's (DestroyTask releases
// before it frees the ID). Shutdown waits, bounded, for the removals at
// the plugin's exit; PluginStart's sweep removes what one left.
type cgroupReleases struct {
	mu      sync.Mutex
	pending map[string]chan struct{}
	wg      sync.WaitGroup
}

// releaseCgroup starts the removal of task taskID's cgroup.
func (d *Driver) releaseCgroup(taskID string) {
	d.startRelease(taskID, func() error { return d.removeCgroup(taskID) })
}

// startRelease runs remove, a removal of taskID's cgroup, in the
// background, after the ones of that ID already under way.
func (d *Driver) startRelease(taskID string, remove func() error) {
	r := &d.releases
	done := make(chan struct{})
	r.mu.Lock()
	prev := r.pending[taskID]
	if r.pending == nil {
		r.pending = map[string]chan struct{}{}
	}
	r.pending[taskID] = done
	r.mu.Unlock()
	r.wg.Go(func() {
		defer func() {
			r.mu.Lock()
			if r.pending[taskID] == done {
				delete(r.pending, taskID)
			}
			r.mu.Unlock()
			close(done)
		}()
		if prev != nil {
			<-prev
		}
		if err := remove(); err != nil {
			d.logger.Warn("task clean-up failed: its cgroup is left", "task_id", taskID, "error", err)
		}
	})
}

// cgroupReleased waits until no removal of taskID's cgroup is under way.
func (d *Driver) cgroupReleased(taskID string) {
	d.releases.mu.Lock()
	done := d.releases.pending[taskID]
	d.releases.mu.Unlock()
	if done != nil {
		<-done
	}
}

// waitReleases waits for the cgroup removals started so far.
func (d *Driver) waitReleases() { d.releases.wg.Wait() }

// Shutdown waits, until ctx ends, for the cgroup removals under way: the
// plugin process is about to exit, and a removal it does not finish is
// left for the next plugin's start-up sweep (sweepCgroups). The ones
// still running when ctx ends are logged by task ID. The executor started
// ahead of the next task is ended first, within the same ctx (Close bounds
// its own wait too).
func (d *Driver) Shutdown(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		d.CloseStandby()
		d.waitReleases()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		d.releases.mu.Lock()
		ids := make([]string, 0, len(d.releases.pending))
		for id := range d.releases.pending {
			ids = append(ids, id)
		}
		d.releases.mu.Unlock()
		slices.Sort(ids)
		d.logger.Warn("plugin exiting with task cgroups still being removed; the next start of the plugin removes them", "task_ids", ids)
	}
}
