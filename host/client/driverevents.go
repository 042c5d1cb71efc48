package client

import (
	"context"
	"errors"
	"iter"
	"slices"
	"strings"
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

// followDriverEvents routes driver name's task events to the runners of
// their tasks until the client stops.
func (c *Client) followDriverEvents(src DriverEventSource, name string) {
	logger := c.logger.Named("driver_events").With("driver", name)
	failures := 0
	for {
		var streamErr error
		for ev, err := range src.TaskEvents(c.ctx, name) {
			if err != nil {
				streamErr = err
				break
			}
			failures = 0
			c.routeDriverEvent(logger, ev)
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

// routeDriverEvent hands ev to the runner of its task, without blocking;
// an event of a task this client does not run (an attempt that is over,
// a task of another client sharing the plugin) is dropped.
func (c *Client) routeDriverEvent(logger hclog.Logger, ev *driverpb.TaskEvent) {
	id := ev.GetTaskId()
	// A driver task ID starts with its alloc's ID (taskrunner's
	// "<alloc>.<task>.<random>").
	allocID, _, _ := strings.Cut(id, ".")
	c.allocs.mu.Lock()
	ar := c.allocs.runners[allocID]
	c.allocs.mu.Unlock()
	if ar != nil {
		if tr := ar.TaskOfAttempt(id); tr != nil {
			tr.DriverEvent(ev)
			return
		}
	}
	logger.Debug("dropping a driver event of a task this client does not run", "task_id", id, "message", ev.GetMessage())
}
