package nodes

import "github.com/prometheus/client_golang/prometheus"

// The heartbeat metrics of the leader's Heartbeater; no labels (a node ID
// would be unbounded).
var (
	heartbeatsReceived = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "berth_heartbeats_received_total",
		Help: "Node heartbeats this server handled as the leader.",
	})
	heartbeatsMissed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "berth_heartbeats_missed_total",
		Help: "Nodes this server, as the leader, marked down because no heartbeat came within the TTL and grace.",
	})
)

// Metrics returns the collectors of the heartbeat metrics, for the agent
// to register.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{heartbeatsReceived, heartbeatsMissed}
}
