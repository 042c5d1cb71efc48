package promtext

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/beorn7/perks/quantile"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The summaries go-metrics' samples become: quantiles of the last maxAge,
// kept in ageBuckets streams started streamDuration apart, fed from a
// buffer of bufCap observations, as client_golang's summaries with these
// options are (the quantiles are estimates within the objectives' errors;
// the same observations give the same estimates).
const (
	summaryMaxAge     = 10 * time.Second
	summaryAgeBuckets = 5
	summaryBufCap     = 500
)

var summaryObjectives = map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001}

// summary holds observations in a buffer and flushes them into every
// stream when the buffer is full, when its window passes and at each
// gathering; the head stream, the oldest, answers the quantiles, and is
// reset and becomes the newest each streamDuration.
type summary struct {
	name, help string
	labels     []*dto.LabelPair
	created    *timestamppb.Timestamp
	ranks      []float64

	mu           sync.Mutex
	buf          []float64
	bufExpires   time.Time
	streams      []*quantile.Stream
	head         int
	headExpires  time.Time
	count        uint64
	sum          float64
	streamPeriod time.Duration
}

func newSummary(name, help string, labels []*dto.LabelPair) *summary {
	t := now()
	s := &summary{
		name: name, help: help, labels: labels, created: timestamppb.New(t),
		buf:          make([]float64, 0, summaryBufCap),
		streamPeriod: summaryMaxAge / summaryAgeBuckets,
	}
	for q := range summaryObjectives {
		s.ranks = append(s.ranks, q)
	}
	slices.Sort(s.ranks)
	for range summaryAgeBuckets {
		s.streams = append(s.streams, quantile.NewTargeted(summaryObjectives))
	}
	s.bufExpires = t.Add(s.streamPeriod)
	s.headExpires = s.bufExpires
	return s
}

// Observe records v.
func (s *summary) Observe(v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := now()
	if t.After(s.bufExpires) {
		s.flush(t)
	}
	s.buf = append(s.buf, v)
	if len(s.buf) == cap(s.buf) {
		s.flush(t)
	}
}

// flush feeds the buffer to every stream, moves the buffer's window to
// the one holding t and rotates the streams to it.
func (s *summary) flush(t time.Time) {
	for _, v := range s.buf {
		for _, st := range s.streams {
			st.Insert(v)
		}
		s.count++
		s.sum += v
	}
	s.buf = s.buf[:0]
	for t.After(s.bufExpires) {
		s.bufExpires = s.bufExpires.Add(s.streamPeriod)
	}
	for !s.bufExpires.Equal(s.headExpires) {
		s.streams[s.head].Reset()
		s.head = (s.head + 1) % len(s.streams)
		s.headExpires = s.headExpires.Add(s.streamPeriod)
	}
}

// Collect adds the summary's series.
func (s *summary) Collect(g *Gathering) {
	s.mu.Lock()
	s.flush(now())
	m := &dto.Summary{SampleCount: new(s.count), SampleSum: new(s.sum), CreatedTimestamp: s.created}
	head := s.streams[s.head]
	for _, r := range s.ranks {
		q := math.NaN()
		if head.Count() > 0 {
			q = head.Query(r)
		}
		m.Quantile = append(m.Quantile, &dto.Quantile{Quantile: new(r), Value: new(q)})
	}
	s.mu.Unlock()
	g.Add(s.name, s.help, dto.MetricType_SUMMARY, &dto.Metric{Label: s.labels, Summary: m})
}
