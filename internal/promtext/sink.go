package promtext

import (
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	metrics "github.com/hashicorp/go-metrics/compat"
	dto "github.com/prometheus/client_model/go"
)

// Sink is a go-metrics sink (raft reports through go-metrics) whose series
// are gathered as Prometheus metrics, as go-metrics' Prometheus sink made
// them: the key's parts joined by '_' with ' ', '.', '=', '-' and '/' made
// '_', the labels as labels, the help text the name; gauges keep the last
// value, counters sum (a negative increment, which that sink's counters
// panicked on, is dropped), samples are summaries. A series, once made,
// is served for the life of the process, as berth's go-metrics sink (made
// with Expiration 0) served it: a counter updated once an hour stays
// monotonic between scrapes.
type Sink struct {
	// Each maps a series' key to its *sinkSeries. A call on a known
	// series takes no lock of the sink's (raft reports on every apply).
	gauges, counters, summaries sync.Map
}

type sinkSeries struct {
	c Collector
	// gauge is a gauge's value (float64 bits).
	gauge atomic.Uint64
}

var _ metrics.MetricSink = (*Sink)(nil)

// NewSink returns an empty sink.
func NewSink() *Sink { return &Sink{} }

var keyReplacer = strings.NewReplacer(" ", "_", ".", "_", "=", "_", "-", "_", "/", "_")

// flatten returns the metric name and the series' key (name and labels).
func flatten(parts []string, labels []metrics.Label) (name, key string) {
	name = keyReplacer.Replace(strings.Join(parts, "_"))
	key = name
	for _, l := range labels {
		key += ";" + l.Name + "=" + l.Value
	}
	return name, key
}

// pairs are a series' labels, one value per name (the last), sorted.
func pairs(labels []metrics.Label) []*dto.LabelPair {
	if len(labels) == 0 {
		return nil
	}
	byName := map[string]string{}
	for _, l := range labels {
		byName[l.Name] = l.Value
	}
	names := slices.Sorted(maps.Keys(byName))
	values := make([]string, len(names))
	for i, n := range names {
		values[i] = byName[n]
	}
	return labelPairs(names, values)
}

// series returns the series of key in m, made by mk at the first use. mk
// makes a series complete (a gauge with its value): a scrape may serve it
// as soon as it is stored.
func series(m *sync.Map, key string, mk func() *sinkSeries) *sinkSeries {
	v, ok := m.Load(key)
	if !ok {
		v, _ = m.LoadOrStore(key, mk())
		if afterPublish != nil {
			afterPublish()
		}
	}
	return v.(*sinkSeries)
}

// afterPublish, when set (by tests), is called after a new series is
// stored and before the call that made it returns.
var afterPublish func()

// SetGauge sets a gauge.
func (s *Sink) SetGauge(parts []string, val float32) { s.SetGaugeWithLabels(parts, val, nil) }

// SetGaugeWithLabels sets a gauge with labels.
func (s *Sink) SetGaugeWithLabels(parts []string, val float32, labels []metrics.Label) {
	name, key := flatten(parts, labels)
	bits := math.Float64bits(float64(val))
	ser := series(&s.gauges, key, func() *sinkSeries {
		ser := &sinkSeries{}
		ser.gauge.Store(bits)
		ls := pairs(labels)
		ser.c = collectorFunc(func(g *Gathering) {
			v := math.Float64frombits(ser.gauge.Load())
			g.Add(name, name, dto.MetricType_GAUGE, &dto.Metric{Label: ls, Gauge: &dto.Gauge{Value: new(v)}})
		})
		return ser
	})
	ser.gauge.Store(bits)
}

// EmitKey does nothing, as in go-metrics' Prometheus sink.
func (s *Sink) EmitKey([]string, float32) {}

// IncrCounter adds to a counter.
func (s *Sink) IncrCounter(parts []string, val float32) { s.IncrCounterWithLabels(parts, val, nil) }

// IncrCounterWithLabels adds to a counter with labels.
func (s *Sink) IncrCounterWithLabels(parts []string, val float32, labels []metrics.Label) {
	if val < 0 {
		return
	}
	name, key := flatten(parts, labels)
	ser := series(&s.counters, key, func() *sinkSeries {
		return &sinkSeries{c: newCounter(name, name, pairs(labels))}
	})
	ser.c.(*Counter).Add(float64(val))
}

// AddSample adds an observation to a summary.
func (s *Sink) AddSample(parts []string, val float32) { s.AddSampleWithLabels(parts, val, nil) }

// AddSampleWithLabels adds an observation to a summary with labels.
func (s *Sink) AddSampleWithLabels(parts []string, val float32, labels []metrics.Label) {
	name, key := flatten(parts, labels)
	ser := series(&s.summaries, key, func() *sinkSeries {
		return &sinkSeries{c: newSummary(name, name, pairs(labels))}
	})
	ser.c.(*summary).Observe(float64(val))
}

// Collect adds every series the sink has made.
func (s *Sink) Collect(g *Gathering) {
	for _, m := range []*sync.Map{&s.gauges, &s.summaries, &s.counters} {
		m.Range(func(_, v any) bool {
			v.(*sinkSeries).c.Collect(g)
			return true
		})
	}
}

// collectorFunc is a Collector.
type collectorFunc func(g *Gathering)

// Collect calls f.
func (f collectorFunc) Collect(g *Gathering) { f(g) }
