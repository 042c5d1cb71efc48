package runhooks

import (
	"time"

	"berth.dev/berth/rpc/pb"
)

// Hook is an alloc or task hook: a name, and the phase interfaces it
// implements, found by type assertion.
type Hook interface {
	// Name names the hook in logs and task events.
	Name() string
}

// Timeouter is an optional Hook interface: the deadline of each of the
// hook's calls, instead of the runner's default.
type Timeouter interface {
	Timeout() time.Duration
}

// Emitter records a task event on the task's state (shown by `alloc
// status`, sent to the servers).
type Emitter interface {
	EmitEvent(*pb.TaskEvent)
}
