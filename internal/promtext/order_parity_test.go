package promtext

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// uncheckedCollector is a client_golang collector without descriptions
// (so its families may mix label names, as promtext's Gathering allows).
type uncheckedCollector []prometheus.Metric

func (uncheckedCollector) Describe(chan<- *prometheus.Desc) {}
func (c uncheckedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c {
		ch <- m
	}
}

// labelled is a series of family f: label names and values alternate.
type labelled []string

// A family's series are ordered as client_golang orders them (by label
// count, then label values), and two series are duplicates only when
// their label names and values are the same.
func TestSeriesOrderAndDuplicatesAsClientGolang(t *testing.T) {
	for _, tc := range []struct {
		name   string
		series []labelled
		dup    bool
	}{
		{"fewer labels first", []labelled{{"a", "1", "b", "0"}, {"b", "2"}, {}, {"a", "3"}}, false},
		{"same values, other names", []labelled{{"a", "x"}, {"b", "x"}}, false},
		{"duplicate apart", []labelled{{"a", "x"}, {"b", "x"}, {"a", "x"}}, true},
		{"duplicate, labels in another order", []labelled{{"b", "2", "a", "1"}, {"a", "1", "b", "2"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var old uncheckedCollector
			var nu []Collector
			for _, s := range tc.series {
				var names, values []string
				for i := 0; i < len(s); i += 2 {
					names, values = append(names, s[i]), append(values, s[i+1])
				}
				old = append(old, prometheus.MustNewConstMetric(prometheus.NewDesc("f", "f", names, nil), prometheus.GaugeValue, 1, values...))
				nu = append(nu, collectorFunc(func(g *Gathering) { Gauge(g, "f", "f", 1, names, values...) }))
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(old)
			oresp, ob := serve(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), http.Header{}, "/")
			nresp, nb := serve(t, Handler(nu...), http.Header{}, "/")
			if want := map[bool]int{false: 200, true: 500}[tc.dup]; oresp.StatusCode != want {
				t.Fatalf("client_golang answered %d, the test wants %d: %s", oresp.StatusCode, want, ob)
			}
			if nresp.StatusCode != oresp.StatusCode {
				t.Fatalf("promtext answered %d, client_golang %d:\n%s", nresp.StatusCode, oresp.StatusCode, nb)
			}
			if !tc.dup && !bytes.Equal(ob, nb) {
				t.Errorf("answer differs from client_golang's:\n--- client_golang\n%s\n--- promtext\n%s", ob, nb)
			}
		})
	}
}
