package taskexec

import (
	"context"
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/sdk/executor"
)

// standbys keeps one executor started ahead of the next task
// (executor.Standby), so a task's start does not wait for the executor to
// be executed and initialised: for berth's binary that was a large part of
// an exec task's start on a busy machine (issue 26). A start takes the
// standby if it is alive, and starts the next one once it returned; a
// start that finds none starts its executor itself, as before.
//
// The standby does not start an isolated task's namespace init ahead
// (executor.NewStandby's isolated), although that would save the second
// re-execution too: measured on this machine, a task whose init was
// started ahead took longer to stop (BenchmarkStopPath, stop -> exited
// 10-30 ms against 7-13 ms, and csiflow's task-exited step about twice
// as long), for a reason not found yet; the stop path matters more.
type standbys struct {
	mu      sync.Mutex
	enabled bool
	closed  bool
	filling bool
	// filled is closed when the standby being started (filling) is in
	// next, or closed because CloseStandby came meanwhile.
	filled chan struct{}
	next   *executor.Standby
	// placed, when a NextStandby waits, is closed when next is set.
	placed chan struct{}
	// start starts a standby: executor.NewStandby, unless a test set it.
	start func(executor.Command, bool) (*executor.Standby, error)
}

// EnableStandby makes the Core keep an executor started ahead of the next
// task (from its first start on). A driver that does calls CloseStandby
// when it shuts down; a standby left behind ends when the plugin does.
func (c *Core) EnableStandby() {
	c.standby.mu.Lock()
	c.standby.enabled = true
	c.standby.mu.Unlock()
}

// CloseStandby ends the standby executor, if any, and starts no other.
// A standby being started meanwhile is ended too before it returns: the
// plugin exits after Shutdown, and one left to a goroutine would outlive
// it.
func (c *Core) CloseStandby() {
	c.standby.mu.Lock()
	c.standby.closed = true
	sb := c.standby.next
	c.standby.next = nil
	filled := c.standby.filled
	c.standby.mu.Unlock()
	if sb != nil {
		sb.Close()
	}
	if filled != nil {
		<-filled
	}
}

// takeStandby returns the standby for a task isolated or not, nil when
// there is none of that kind alive.
func (c *Core) takeStandby(isolated bool) *executor.Standby {
	c.standby.mu.Lock()
	sb := c.standby.next
	if sb == nil || !c.standby.enabled {
		c.standby.mu.Unlock()
		return nil
	}
	c.standby.next = nil
	c.standby.mu.Unlock()
	if sb.Isolated() != isolated || !sb.Alive() {
		sb.Close()
		return nil
	}
	return sb
}

// fillStandby starts the next standby, for tasks isolated or not, unless
// there is one, one is being started, or standbys are off.
func (c *Core) fillStandby(self executor.Command, isolated bool) {
	c.standby.mu.Lock()
	if !c.standby.enabled || c.standby.closed || c.standby.filling || c.standby.next != nil {
		c.standby.mu.Unlock()
		return
	}
	c.standby.filling = true
	filled := make(chan struct{})
	c.standby.filled = filled
	start := c.standby.start
	c.standby.mu.Unlock()
	defer close(filled)
	if start == nil {
		start = executor.NewStandby
	}
	sb, err := start(self, isolated)
	c.standby.mu.Lock()
	c.standby.filling = false
	c.standby.filled = nil
	if err != nil {
		c.standby.mu.Unlock()
		c.logger.Warn("starting an executor ahead of the next task failed; the next start starts its own", "error", err)
		return
	}
	if c.standby.closed {
		c.standby.mu.Unlock()
		sb.Close()
		return
	}
	c.standby.next = sb
	if c.standby.placed != nil {
		close(c.standby.placed)
		c.standby.placed = nil
	}
	c.standby.mu.Unlock()
}

// startExecutor starts spec's executor: the standby when there is one for
// it, a new one otherwise.
func (c *Core) startExecutor(ctx context.Context, self executor.Command, spec executor.Spec, logger hclog.Logger) (*executor.Process, error) {
	if sb := c.takeStandby(false); sb != nil {
		return sb.Start(ctx, spec, logger)
	}
	return executor.Start(ctx, self, spec, logger)
}
