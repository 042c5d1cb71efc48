package agent

import (
	"fmt"
	"net/http"
	"sync"

	metrics "github.com/hashicorp/go-metrics/compat"

	"berth.dev/berth/internal/promtext"
)

// Metrics are process-wide (raft reports to go-metrics' global sink), so the
// registry is set up once per process however many agents a test starts.
var (
	metricsOnce     sync.Once
	metricsRegistry *promtext.Registry
	metricsErr      error
)

func metricsHandler() (http.Handler, error) {
	metricsOnce.Do(func() {
		// The sink makes go-metrics' (raft's) series Prometheus ones, as
		// go-metrics' Prometheus sink did (internal/promtext).
		reg := &promtext.Registry{}
		sink := promtext.NewSink()
		reg.Register(sink)
		conf := metrics.DefaultConfig("")
		conf.EnableHostname = false
		conf.EnableHostnameLabel = false
		conf.EnableRuntimeMetrics = false
		if _, err := metrics.NewGlobal(conf, sink); err != nil {
			metricsErr = fmt.Errorf("metrics: %w", err)
			return
		}
		reg.Register(storageMetrics()...)
		metricsRegistry = reg
	})
	if metricsErr != nil {
		return nil, metricsErr
	}
	return promtext.Handler(metricsRegistry), nil
}

// metrics serves Prometheus text. Gauges derived from the cluster's state
// (nodes by status; claims, attachments, allocs and plugins,
// metrics_state.go) are read from this agent's local state at scrape
// time, by the leader only.
func (a *Agent) metrics(w http.ResponseWriter, r *http.Request) error {
	h, err := metricsHandler()
	if err != nil {
		return err
	}
	if a.server != nil {
		h = withStateGauges(a.server.State(), a.server.IsLeader)
	}
	h.ServeHTTP(w, r)
	return nil
}

// InitMetrics installs the process-wide metrics sink early, so metrics
// emitted while the agent starts (raft's first election) are kept.
func InitMetrics() error {
	_, err := metricsHandler()
	return err
}
