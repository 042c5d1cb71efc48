package promtext

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A Collector adds its series to a gathering.
type Collector interface {
	Collect(g *Gathering)
}

// labelPairs returns the pairs of names and values, sorted by name.
func labelPairs(names, values []string) []*dto.LabelPair {
	ps := make([]*dto.LabelPair, len(names))
	for i := range names {
		ps[i] = &dto.LabelPair{Name: new(names[i]), Value: new(values[i])}
	}
	slices.SortFunc(ps, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	return ps
}

// Counter is a monotonic count. Whole increments are summed as integers
// and the rest as a float, as client_golang sums them.
type Counter struct {
	name, help string
	labels     []*dto.LabelPair
	created    *timestamppb.Timestamp
	mu         sync.Mutex
	whole      uint64
	frac       float64
}

// NewCounter returns a counter without labels.
func NewCounter(name, help string) *Counter {
	return newCounter(name, help, nil)
}

func newCounter(name, help string, labels []*dto.LabelPair) *Counter {
	return &Counter{name: name, help: help, labels: labels, created: timestamppb.New(now())}
}

// Inc adds 1.
func (c *Counter) Inc() { c.Add(1) }

// Add adds v, which may not be negative.
func (c *Counter) Add(v float64) {
	if v < 0 {
		panic("promtext: a counter cannot decrease")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := uint64(v); float64(w) == v {
		c.whole += w
		return
	}
	c.frac += v
}

func (c *Counter) value() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frac + float64(c.whole)
}

// Collect adds the counter's series.
func (c *Counter) Collect(g *Gathering) {
	g.Add(c.name, c.help, dto.MetricType_COUNTER, &dto.Metric{
		Label:   c.labels,
		Counter: &dto.Counter{Value: new(c.value()), CreatedTimestamp: c.created},
	})
}

// CounterVec is a counter per set of label values.
type CounterVec struct {
	vec[*Counter]
}

// NewCounterVec returns counters with the labels named.
func NewCounterVec(name, help string, labelNames ...string) *CounterVec {
	v := &CounterVec{vec[*Counter]{labelNames: labelNames}}
	v.make = func(values []string) *Counter { return newCounter(name, help, labelPairs(labelNames, values)) }
	return v
}

// WithLabelValues returns the counter of these label values (in the order
// of the names), made at the first use.
func (v *CounterVec) WithLabelValues(values ...string) *Counter { return v.with(values) }

// Histogram counts observations in buckets, as Prometheus histograms do:
// an observation equal to a bucket's upper bound counts in that bucket.
type Histogram struct {
	name, help string
	labels     []*dto.LabelPair
	bounds     []float64
	created    *timestamppb.Timestamp
	mu         sync.Mutex
	counts     []uint64
	count      uint64
	sum        float64
}

func newHistogram(name, help string, bounds []float64, labels []*dto.LabelPair) *Histogram {
	return &Histogram{name: name, help: help, labels: labels, bounds: bounds, counts: make([]uint64, len(bounds)), created: timestamppb.New(now())}
}

// Observe records v. NaN counts in no bucket but +Inf's (and in the count
// and sum), as client_golang counts it.
func (h *Histogram) Observe(v float64) {
	i := len(h.bounds)
	if !math.IsNaN(v) {
		i, _ = slices.BinarySearch(h.bounds, v)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if i < len(h.counts) {
		h.counts[i]++
	}
	h.count++
	h.sum += v
}

// Collect adds the histogram's series.
func (h *Histogram) Collect(g *Gathering) {
	h.mu.Lock()
	m := &dto.Histogram{
		Bucket:           make([]*dto.Bucket, len(h.bounds)),
		SampleCount:      new(h.count),
		SampleSum:        new(h.sum),
		CreatedTimestamp: h.created,
	}
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		m.Bucket[i] = &dto.Bucket{CumulativeCount: new(cum), UpperBound: new(b)}
	}
	h.mu.Unlock()
	g.Add(h.name, h.help, dto.MetricType_HISTOGRAM, &dto.Metric{Label: h.labels, Histogram: m})
}

// HistogramVec is a histogram per set of label values.
type HistogramVec struct {
	vec[*Histogram]
}

// NewHistogramVec returns histograms with these buckets' upper bounds
// (strictly ascending; +Inf is implied) and the labels named. Bounds that
// do not ascend strictly panic, as in client_golang.
func NewHistogramVec(name, help string, bounds []float64, labelNames ...string) *HistogramVec {
	for i := 1; i < len(bounds); i++ {
		if bounds[i-1] >= bounds[i] {
			panic(fmt.Errorf("promtext: histogram buckets must be in increasing order: %f >= %f", bounds[i-1], bounds[i]))
		}
	}
	bounds = slices.Clone(bounds)
	if n := len(bounds); n > 0 && math.IsInf(bounds[n-1], 1) {
		bounds = bounds[:n-1]
	}
	v := &HistogramVec{vec[*Histogram]{labelNames: labelNames}}
	v.make = func(values []string) *Histogram {
		return newHistogram(name, help, bounds, labelPairs(labelNames, values))
	}
	return v
}

// WithLabelValues returns the histogram of these label values (in the
// order of the names), made at the first use.
func (v *HistogramVec) WithLabelValues(values ...string) *Histogram { return v.with(values) }

// ExponentialBuckets returns count upper bounds, the first start, each
// factor times the one before.
func ExponentialBuckets(start, factor float64, count int) []float64 {
	if count < 1 || start <= 0 || factor <= 1 {
		panic("promtext: ExponentialBuckets needs count ≥ 1, start > 0 and factor > 1")
	}
	bs := make([]float64, count)
	for i := range bs {
		bs[i] = start
		start *= factor
	}
	return bs
}

// vec holds a metric per set of label values.
type vec[M Collector] struct {
	labelNames []string
	make       func(values []string) M
	mu         sync.Mutex
	byValues   map[string]M
}

func (v *vec[M]) with(values []string) M {
	if len(values) != len(v.labelNames) {
		panic("promtext: " + strings.Join(v.labelNames, ",") + ": wrong number of label values")
	}
	key := strings.Join(values, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	m, ok := v.byValues[key]
	if !ok {
		if v.byValues == nil {
			v.byValues = map[string]M{}
		}
		m = v.make(slices.Clone(values))
		v.byValues[key] = m
	}
	return m
}

// Collect adds every series made so far.
func (v *vec[M]) Collect(g *Gathering) {
	v.mu.Lock()
	ms := make([]M, 0, len(v.byValues))
	for _, m := range v.byValues {
		ms = append(ms, m)
	}
	v.mu.Unlock()
	for _, m := range ms {
		m.Collect(g)
	}
}

// Gauge adds a gauge's series, for a Collector that reads its values at
// each gathering; labelNames pair with labelValues.
func Gauge(g *Gathering, name, help string, value float64, labelNames []string, labelValues ...string) {
	g.Add(name, help, dto.MetricType_GAUGE, &dto.Metric{Label: labelPairs(labelNames, labelValues), Gauge: &dto.Gauge{Value: new(value)}})
}

// now is the clock of created timestamps and summaries' windows.
var now = time.Now
