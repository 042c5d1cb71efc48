package taskdrivers

import (
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/pluginsup"
)

// Backoff is how long the manager waits before restarting a plugin that
// exited or failed to start: Initial, doubling with every consecutive
// failure, never more than Max. Storage adapters share it.
type Backoff = backoff.Backoff

// DefaultBackoff is the restart backoff of a Manager whose Config has none.
var DefaultBackoff = pluginsup.DefaultRestart

var sleep = backoff.Sleep
