package taskdrivers

import (
	"context"
	"errors"
	"fmt"

	"berth.dev/berth/sdk"
)

// destroyNext is a task whose plugin died inside StartTask: the plugin may
// have started it (a container outlives its plugin), and no handle names
// it. The next plugin of in destroys it before any call gets that plugin.
type destroyNext struct {
	in   *instance
	dead *running // the plugin that died; it is not asked
}

// destroyOnNext records id for the next plugin of d's driver to destroy,
// and returns at once: the next launch may be a backoff away, and the
// failed start's caller (an alloc being stopped, a shutdown) must not wait
// for it. Until it is destroyed no start may reuse the ID.
func (d *Driver) destroyOnNext(dead *running, id string) {
	m := d.in.m
	m.mu.Lock()
	if m.destroyNext == nil {
		m.destroyNext = map[string]destroyNext{}
	}
	m.destroyNext[id] = destroyNext{in: d.in, dead: dead}
	m.mu.Unlock()
	d.in.gone(dead)
}

// takeDestroys removes and returns the IDs in must destroy on plugin r
// (every one not recorded against r itself).
func (in *instance) takeDestroys(r *running) map[string]destroyNext {
	in.m.mu.Lock()
	defer in.m.mu.Unlock()
	var ids map[string]destroyNext
	for id, p := range in.m.destroyNext {
		if p.in != in || (r != nil && p.dead == r) {
			continue
		}
		if ids == nil {
			ids = map[string]destroyNext{}
		}
		ids[id] = p
		delete(in.m.destroyNext, id)
	}
	return ids
}

// pendingDestroys returns the IDs in still has to destroy.
func (in *instance) pendingDestroys() []string {
	in.m.mu.Lock()
	defer in.m.mu.Unlock()
	var ids []string
	for id, p := range in.m.destroyNext {
		if p.in == in {
			ids = append(ids, id)
		}
	}
	return ids
}

// destroyPending destroys, with c (the client of plugin r, or of a plugin
// in Setup when r is nil), the tasks earlier plugins died starting. It
// fails only when the plugin dies or ctx ends; the IDs not yet destroyed
// stay recorded for the plugin after it. A destroy refused otherwise is
// logged and given up: asking again would not change the answer.
func (in *instance) destroyPending(ctx context.Context, c *sdk.DriverClient, r *running) error {
	ids := in.takeDestroys(r)
	var failed error
	for id, p := range ids {
		if failed != nil {
			in.putBack(id, p)
			continue
		}
		err := c.DestroyTask(ctx, id, true)
		switch {
		case err == nil:
			in.logger.Info("destroyed the task of a start the previous plugin died in", "task_id", id)
		case errors.Is(err, sdk.ErrTaskNotFound):
			in.logger.Warn("the plugin does not know the task of a start the previous plugin died in; if that plugin started it, it runs unsupervised",
				"task_id", id)
		case errors.Is(err, sdk.ErrPluginShutdown), ctx.Err() != nil:
			in.putBack(id, p)
			failed = fmt.Errorf("destroying task %q of a start the previous plugin died in: %w", id, err)
		default:
			in.logger.Error("the task of a start the previous plugin died in could not be destroyed; it may run unsupervised",
				"task_id", id, "error", err)
		}
	}
	return failed
}

func (in *instance) putBack(id string, p destroyNext) {
	in.m.mu.Lock()
	defer in.m.mu.Unlock()
	if in.m.destroyNext == nil {
		in.m.destroyNext = map[string]destroyNext{}
	}
	in.m.destroyNext[id] = p
}
