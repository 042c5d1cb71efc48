package pluginsup

import (
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/version"
)

// DefaultRestart is the restart backoff of a supervisor configured with
// none: a second, doubling to a minute.
var DefaultRestart = backoff.Backoff{Initial: time.Second, Max: time.Minute}

// Options are the settings every plugin manager has (the task driver
// manager, the storage adapter manager): each embeds them in its Config
// and hands them to its Supervisor. A zero field means its default.
type Options struct {
	// Logger logs the plugins' lives. Default: none.
	Logger hclog.Logger
	// StartTimeout bounds each launch of a plugin: handshake, API
	// negotiation and whatever Plugin.Setup does. Default 30s.
	StartTimeout time.Duration
	// Backoff spaces restarts of a plugin that keeps failing. Default
	// DefaultRestart.
	Backoff backoff.Backoff
	// ResetAfter is how long a plugin must run before its next failure
	// counts as the first again. Default 5m.
	ResetAfter time.Duration
	// BerthVersion is recorded with the reattach record of built-in
	// plugins; one launched by another version is replaced rather than
	// reattached. Default version.Version.
	BerthVersion string
}

// SetDefaults fills in the zero fields.
func (o *Options) SetDefaults() {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.Backoff.Initial <= 0 || o.Backoff.Max < o.Backoff.Initial {
		o.Backoff = DefaultRestart
	}
	if o.ResetAfter <= 0 {
		o.ResetAfter = 5 * time.Minute
	}
	if o.BerthVersion == "" {
		o.BerthVersion = version.Version
	}
}
