package testutil

import (
	"sort"
	"sync"
	"time"

	"berth.dev/berth/internal/clock"
)

// ManualClock is a clock that moves only when told to. Timers made with
// AfterFunc fire, in deadline order, during Advance.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

// NewManualClock returns a clock set to a fixed, arbitrary instant.
func NewManualClock() *ManualClock {
	return &ManualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

type manualTimer struct {
	c       *ManualClock
	at      time.Time
	f       func()
	stopped bool
	fired   bool
}

// AfterFunc schedules f to run (synchronously, inside Advance) after d.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.stopped || t.fired {
		return false
	}
	t.stopped = true
	return true
}

// Pending returns how many timers are armed.
func (c *ManualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped && !t.fired {
			n++
		}
	}
	return n
}

// Deadlines returns when each armed timer fires, earliest first: a test
// can tell the timer it waits for from others armed meanwhile.
func (c *ManualClock) Deadlines() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var at []time.Time
	for _, t := range c.timers {
		if !t.stopped && !t.fired {
			at = append(at, t.at)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	return at
}

// Advance moves the clock forward by d, running every timer that comes due,
// earliest first. Timer functions run without the clock's lock held, so
// they may arm new timers.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
		var due *manualTimer
		for _, t := range c.timers {
			if !t.stopped && !t.fired && !t.at.After(target) {
				due = t
				break
			}
		}
		if due == nil {
			c.now = target
			c.gc()
			c.mu.Unlock()
			return
		}
		due.fired = true
		if due.at.After(c.now) {
			c.now = due.at
		}
		c.mu.Unlock()
		due.f()
	}
}

// gc drops finished timers; the caller holds mu.
func (c *ManualClock) gc() {
	live := c.timers[:0]
	for _, t := range c.timers {
		if !t.stopped && !t.fired {
			live = append(live, t)
		}
	}
	c.timers = live
}
