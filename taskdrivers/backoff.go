package taskdrivers

import "berth.dev/berth/internal/pluginproc"

// Backoff is how long the manager waits before restarting a plugin that
// exited or failed to start: Initial, doubling with every consecutive
// failure, never more than Max. Storage adapters (csiadapters) share it.
type Backoff = pluginproc.Backoff

// DefaultBackoff is the restart backoff of a Manager whose Config has none.
var DefaultBackoff = pluginproc.DefaultBackoff

var sleep = pluginproc.Sleep
