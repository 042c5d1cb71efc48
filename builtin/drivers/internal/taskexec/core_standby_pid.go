package taskexec

import "context"

// NextStandby waits until there is an executor started ahead of the next
// task and returns its process ID; ctx's error if it ends first (standbys
// off, or none to be started). For tests of the drivers built on the Core:
// which executor a start takes, and that Shutdown ends it.
func (c *Core) NextStandby(ctx context.Context) (int, error) {
	for {
		c.standby.mu.Lock()
		if sb := c.standby.next; sb != nil {
			c.standby.mu.Unlock()
			return sb.Pid(), nil
		}
		if c.standby.placed == nil {
			c.standby.placed = make(chan struct{})
		}
		placed := c.standby.placed
		c.standby.mu.Unlock()
		select {
		case <-placed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
