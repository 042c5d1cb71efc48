package server

import "time"

// Clock is the server's source of time. Leader loops (heartbeat timers) take
// it so tests drive time by hand instead of sleeping.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a stoppable pending call made by Clock.AfterFunc.
type Timer interface {
	// Stop prevents the call; it reports false if the call already ran or was stopped.
	Stop() bool
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (RealClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
