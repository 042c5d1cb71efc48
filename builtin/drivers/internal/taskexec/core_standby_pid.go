package taskexec

// StandbyPid is the process ID of the executor started ahead of the next
// task, 0 while there is none (none started yet, one being started, or
// standbys off). For tests of the drivers built on the Core: which
// executor a start took.
func (c *Core) StandbyPid() int {
	c.standby.mu.Lock()
	defer c.standby.mu.Unlock()
	if c.standby.next == nil {
		return 0
	}
	return c.standby.next.Pid()
}
