package promtext

import (
	"testing"

	metrics "github.com/hashicorp/go-metrics/compat"
	promsink "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// What raft's reports cost through the sink, against go-metrics'
// Prometheus sink: a counter and a sample, as on every apply.
func BenchmarkSinkApply(b *testing.B) {
	old, err := promsink.NewPrometheusSinkFrom(promsink.PrometheusOpts{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range []struct {
		name string
		sink metrics.MetricSink
	}{{"client_golang", old}, {"promtext", NewSink()}} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				s.sink.IncrCounter([]string{"raft", "apply"}, 1)
				s.sink.AddSample([]string{"raft", "fsm", "apply"}, float32(i%100))
			}
		})
	}
}
