package nodes

import "berth.dev/berth/internal/promtext"

// The heartbeat metrics of the leader's Heartbeater; no labels (a node ID
// would be unbounded).
var (
	heartbeatsReceived = promtext.NewCounter("berth_heartbeats_received_total",
		"Node heartbeats this server handled as the leader.")
	heartbeatsMissed = promtext.NewCounter("berth_heartbeats_missed_total",
		"Nodes this server, as the leader, marked down because no heartbeat came within the TTL and grace.")
)

// Metrics returns the collectors of the heartbeat metrics, for the agent
// to register.
func Metrics() []promtext.Collector {
	return []promtext.Collector{heartbeatsReceived, heartbeatsMissed}
}
