package testutil

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"berth.dev/berth/internal/promtext"
)

// MetricValue gathers cs and returns the value of the series of family name
// whose labels include labels: a counter's or gauge's value, a histogram's
// sample count; 0 when there is no such series (a vector's series appears
// with its first observation). Metrics are process-wide, so tests compare
// the value before and after what they do.
func MetricValue(t testing.TB, name string, labels map[string]string, cs ...promtext.Collector) float64 {
	t.Helper()
	if m := findMetric(t, name, labels, cs); m != nil {
		return sampleValue(m)
	}
	return 0
}

// HistogramSum is the sum of the observations of MetricValue's series, a
// histogram; 0 when there is no such series.
func HistogramSum(t testing.TB, name string, labels map[string]string, cs ...promtext.Collector) float64 {
	t.Helper()
	return findMetric(t, name, labels, cs).GetHistogram().GetSampleSum()
}

func findMetric(t testing.TB, name string, labels map[string]string, cs []promtext.Collector) *dto.Metric {
	t.Helper()
	fams, err := promtext.Gather(cs...)
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				return m
			}
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}
