package client

import (
	"context"
	"errors"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/taskdrivers"
)

// DriverEventSource is what the client needs, besides allocrunner.Drivers,
// to record what drivers say about their tasks: Config.TaskDrivers
// implementing it (ManagerDrivers does) has the client subscribe to every
// driver's task events while it runs allocs.
type DriverEventSource interface {
	// EventDrivers names the drivers to subscribe to.
	EventDrivers() []string
	// TaskEvents yields the named driver's task events until ctx ends,
	// following its plugin's restarts (taskdrivers.Driver.TaskEvents).
	TaskEvents(ctx context.Context, driver string) iter.Seq2[*driverpb.TaskEvent, error]
}

// EventDrivers implements DriverEventSource.
func (d managerDrivers) EventDrivers() []string {
	names := make([]string, 0)
	for name := range d.m.DriverInfos() {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// TaskEvents implements DriverEventSource.
func (d managerDrivers) TaskEvents(ctx context.Context, driver string) iter.Seq2[*driverpb.TaskEvent, error] {
	drv, err := d.m.Driver(driver)
	if err != nil {
		return func(yield func(*driverpb.TaskEvent, error) bool) { yield(nil, err) }
	}
	return drv.TaskEvents(ctx)
}

// driverEventRetry paces new subscriptions after a driver's event stream
// failed while its plugin runs.
var driverEventRetry = backoff.Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.2}

// startDriverEvents subscribes to every driver's task events, one
// subscription per driver, each until the client stops (or the driver
// fails for good). A subscription waits for its driver's plugin to run and
// subscribes again to each restarted plugin; events a driver emits while
// no subscription is up are lost (delivery is best effort).
func (c *Client) startDriverEvents() {
	src, ok := c.cfg.TaskDrivers.(DriverEventSource)
	if !ok {
		return
	}
	for _, name := range src.EventDrivers() {
		c.allocs.driverEvents.Add(1)
		go func() {
			defer c.allocs.driverEvents.Done()
			c.followDriverEvents(src, name)
		}()
	}
}

// driverEventBacklog bounds the events of one driver read from its
// stream and not yet routed.
const driverEventBacklog = 1024

// followDriverEvents routes driver name's task events to the runners of
// their tasks until the client stops. The stream is read apart from the
// routing, into a bounded backlog (eventRing): a routing that waits (for
// the alloc map, held while new allocs' runners are built) never holds up
// the driver's stream; past the bound the oldest events are dropped and
// counted.
func (c *Client) followDriverEvents(src DriverEventSource, name string) {
	logger := c.logger.Named("driver_events").With("driver", name)
	ring := newEventRing(driverEventBacklog)
	routed := make(chan struct{})
	go func() {
		defer close(routed)
		for {
			ev, dropped, ok := ring.next(c.ctx.Done())
			if !ok {
				return
			}
			if dropped > 0 {
				logger.Warn("the client fell behind the driver's task events; dropped the oldest", "dropped", dropped)
			}
			c.routeDriverEvent(logger, ev)
		}
	}()
	defer func() { <-routed }()
	failures := 0
	for {
		var streamErr error
		for ev, err := range src.TaskEvents(c.ctx, name) {
			if err != nil {
				streamErr = err
				break
			}
			failures = 0
			ring.push(ev)
		}
		switch {
		case c.ctx.Err() != nil, errors.Is(streamErr, taskdrivers.ErrShutdown):
			return
		case errors.Is(streamErr, taskdrivers.ErrDriverFailed), errors.Is(streamErr, taskdrivers.ErrUnknownDriver):
			logger.Warn("driver failed for good; its task events are not followed", "error", streamErr)
			return
		}
		failures++
		d := driverEventRetry.Delay(failures)
		logger.Warn("driver task event stream ended; subscribing again", "error", streamErr, "retry_in", d)
		if !backoff.Sleep(c.ctx.Done(), d) {
			return
		}
	}
}

// eventRing is a bounded FIFO of driver events that never blocks its
// writer: past its bound the oldest event goes, counted.
type eventRing struct {
	mu      sync.Mutex
	evs     []*driverpb.TaskEvent
	max     int
	dropped uint64 // since the last next
	total   uint64
	ready   chan struct{} // has a value while evs is not empty
}

func newEventRing(max int) *eventRing {
	return &eventRing{max: max, ready: make(chan struct{}, 1)}
}

// push appends ev, dropping the oldest event when full.
func (r *eventRing) push(ev *driverpb.TaskEvent) {
	r.mu.Lock()
	if len(r.evs) == r.max {
		r.evs[0] = nil
		r.evs = r.evs[1:]
		r.dropped++
		r.total++
	}
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

// next waits for the oldest event and returns it with the count of
// events dropped since the previous next; ok is false once done is
// closed.
func (r *eventRing) next(done <-chan struct{}) (ev *driverpb.TaskEvent, dropped uint64, ok bool) {
	for {
		r.mu.Lock()
		if len(r.evs) > 0 {
			ev, dropped = r.evs[0], r.dropped
			r.evs[0] = nil
			r.evs, r.dropped = r.evs[1:], 0
			r.mu.Unlock()
			return ev, dropped, true
		}
		r.mu.Unlock()
		select {
		case <-r.ready:
		case <-done:
			return nil, 0, false
		}
	}
}

// droppedTotal is how many events the ring dropped.
func (r *eventRing) droppedTotal() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// routeDriverEvent hands ev to the runner of its task, without blocking;
// an event of a task this client does not run (an attempt that is over,
// a task of another client sharing the plugin) is dropped.
func (c *Client) routeDriverEvent(logger hclog.Logger, ev *driverpb.TaskEvent) {
	id := ev.GetTaskId()
	// A driver task ID starts with its alloc's ID (taskrunner's
	// "<alloc>.<task>.<random>").
	allocID, _, _ := strings.Cut(id, ".")
	if ar, err := c.runner(allocID); err == nil {
		if tr := ar.TaskOfAttempt(id); tr != nil {
			tr.DriverEvent(ev)
			return
		}
	}
	logger.Debug("dropping a driver event of a task this client does not run", "task_id", id, "message", ev.GetMessage())
}
