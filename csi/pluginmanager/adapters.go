package pluginmanager

import "google.golang.org/grpc"

// AdapterSource is what the manager needs of the storage adapters (the
// static catalog): their names, a connection to each, its current health
// and the events that change it. The agent adapts its storage adapter
// manager (csi/adapters) to it; tests give a fake. It is declared here, in
// the manager's own types, so that the CSI library does not link the
// adapters' supervisor.
type AdapterSource interface {
	// Names lists the adapters; each is one plugin whose ID is its name.
	Names() []string
	// Conn returns a connection to the adapter's CSI services that follows
	// its restarts.
	Conn(name string) (grpc.ClientConnInterface, error)
	// State returns the adapter's current condition.
	State(name string) (AdapterState, error)
	// Subscribe returns every event from now on, in order, until cancel.
	Subscribe() (events <-chan AdapterEvent, cancel func())
}

// AdapterState is an adapter's current condition, as its source reports
// it.
type AdapterState struct {
	// Running is true while an adapter process is up and connected.
	Running bool
	// Healthy is true when the running process last said it is ready.
	Healthy bool
	// Reason says why the adapter is not healthy.
	Reason string
}

// AdapterEventKind says what happened to an adapter.
type AdapterEventKind int

// The kinds of AdapterEvent.
const (
	// AdapterStarted: a new adapter process answered its handshake.
	AdapterStarted AdapterEventKind = iota + 1
	// AdapterReattached: the process a previous client left running was
	// reattached.
	AdapterReattached
	// AdapterHealthy: the adapter said it is ready.
	AdapterHealthy
	// AdapterUnhealthy: the adapter is not ready; Reason says why.
	AdapterUnhealthy
	// AdapterExited: the process exited or stopped answering.
	AdapterExited
	// AdapterStartFailed: a launch failed.
	AdapterStartFailed
)

var adapterKindNames = map[AdapterEventKind]string{
	AdapterStarted: "started", AdapterReattached: "reattached", AdapterHealthy: "healthy",
	AdapterUnhealthy: "unhealthy", AdapterExited: "exited", AdapterStartFailed: "start-failed",
}

// String is the kind's word, which starts the reason of an unhealthy
// adapter ("exited: ...").
func (k AdapterEventKind) String() string {
	if s, ok := adapterKindNames[k]; ok {
		return s
	}
	return "unknown"
}

// AdapterEvent is one change of an adapter's process or health.
type AdapterEvent struct {
	Adapter string
	Kind    AdapterEventKind
	// Reason explains unhealthy, exited and start-failed events.
	Reason string
}
