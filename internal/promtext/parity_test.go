package promtext

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	metrics "github.com/hashicorp/go-metrics/compat"
	promsink "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The same instrumentation, written once against client_golang (what
// berth served before) and once against this package.
type instrumentation struct {
	hist      func(method, code string, v float64)
	expHist   func(op string, v float64)
	counter   func()
	counterBy func(method, code string, v float64)
	sink      metrics.MetricSink
	handler   http.Handler
}

func oldInstrumentation(t *testing.T, gauges map[string]float64) instrumentation {
	reg := prometheus.NewRegistry()
	hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "berth_csi_call_duration_seconds", Help: "Latency of \"CSI\" calls\\by method\nand code.",
		Buckets: []float64{0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"method", "code"})
	eh := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "berth_eval_duration_seconds", Help: "Evals.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"op"})
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_heartbeats_received_total", Help: "Heartbeats."})
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berth_csi_call_errors_total", Help: "Errors."}, []string{"method", "code"})
	reg.MustRegister(hv, eh, c, cv)
	sink, err := promsink.NewPrometheusSinkFrom(promsink.PrometheusOpts{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	desc := prometheus.NewDesc("berth_volume_claims", "Volume claims by state.", []string{"state"}, nil)
	state := prometheus.NewRegistry()
	state.MustRegister(constCollector{desc, gauges})
	return instrumentation{
		hist:      func(m, code string, v float64) { hv.WithLabelValues(m, code).Observe(v) },
		expHist:   func(op string, v float64) { eh.WithLabelValues(op).Observe(v) },
		counter:   c.Inc,
		counterBy: func(m, code string, v float64) { cv.WithLabelValues(m, code).Add(v) },
		sink:      sink,
		handler:   promhttp.HandlerFor(prometheus.Gatherers{reg, state}, promhttp.HandlerOpts{}),
	}
}

type constCollector struct {
	desc   *prometheus.Desc
	gauges map[string]float64
}

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c constCollector) Collect(ch chan<- prometheus.Metric) {
	for state, v := range c.gauges {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, state)
	}
}

func newInstrumentation(gauges map[string]float64) instrumentation {
	var reg Registry
	hv := NewHistogramVec("berth_csi_call_duration_seconds", "Latency of \"CSI\" calls\\by method\nand code.",
		[]float64{0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}, "method", "code")
	eh := NewHistogramVec("berth_eval_duration_seconds", "Evals.", ExponentialBuckets(0.001, 4, 10), "op")
	c := NewCounter("berth_heartbeats_received_total", "Heartbeats.")
	cv := NewCounterVec("berth_csi_call_errors_total", "Errors.", "method", "code")
	sink := NewSink()
	reg.Register(hv, eh, c, cv, sink)
	state := collectorFunc(func(g *Gathering) {
		for s, v := range gauges {
			Gauge(g, "berth_volume_claims", "Volume claims by state.", v, []string{"state"}, s)
		}
	})
	return instrumentation{
		hist:      func(m, code string, v float64) { hv.WithLabelValues(m, code).Observe(v) },
		expHist:   func(op string, v float64) { eh.WithLabelValues(op).Observe(v) },
		counter:   c.Inc,
		counterBy: func(m, code string, v float64) { cv.WithLabelValues(m, code).Add(v) },
		sink:      sink,
		handler:   Handler(&reg, state),
	}
}

// observe makes the same calls on an instrumentation.
func observe(in instrumentation) {
	for i := range 1203 {
		v := float64(i%97) / 1000
		in.hist("NodeStageVolume", "OK", v)
		if i%7 == 0 {
			in.hist("NodePublishVolume", "Unavailable", v*3)
			in.counterBy("NodePublishVolume", "Unavailable", 1)
		}
		in.sink.AddSample([]string{"raft", "commitTime"}, float32(i%53)/7)
		in.sink.AddSampleWithLabels([]string{"raft", "rpc", "appendEntries"}, float32(i%11), []metrics.Label{{Name: "peer", Value: "a\"b\\c\nd"}})
	}
	in.hist("NodeStageVolume", "OK", 0.005) // on a bound
	in.hist("NodeStageVolume", "OK", 1e9)   // past the last
	in.expHist("plan", 0.004)
	in.counter()
	in.counter()
	in.counterBy("CreateVolume", "Internal", 0.25)
	in.counterBy("CreateVolume", "Internal", 2)
	in.sink.IncrCounter([]string{"raft", "apply"}, 1)
	in.sink.IncrCounter([]string{"raft", "apply"}, 2.5)
	in.sink.IncrCounterWithLabels([]string{"raft.state-candidate"}, 1, []metrics.Label{{Name: "x", Value: "1"}, {Name: "x", Value: "2"}, {Name: "a", Value: "z"}})
	in.sink.SetGauge([]string{"raft", "leader", "dispatchNumLogs"}, 3)
	in.sink.SetGauge([]string{"raft", "leader", "dispatchNumLogs"}, 1e7)
	in.sink.SetGaugeWithLabels([]string{"raft/peers"}, -0.5, []metrics.Label{{Name: "kind", Value: "voter"}})
	in.sink.EmitKey([]string{"ignored"}, 1)
}

func serve(t *testing.T, h http.Handler, header http.Header, target string) (*http.Response, []byte) {
	t.Helper()
	req := httptest.NewRequest("GET", target, nil)
	req.Header = header
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	return resp, b
}

// TestHandlerServesWhatClientGolangServed: the same observations give the
// same answer, byte for byte, with the same headers, for a plain request,
// one accepting gzip (Prometheus' and Go's clients send it), one asking
// for some families, and the same refusal of an inconsistent family.
func TestHandlerServesWhatClientGolangServed(t *testing.T) {
	gauges := map[string]float64{"reserved": 0, "in-use": 3, "node-detached": 1}
	old, nu := oldInstrumentation(t, gauges), newInstrumentation(gauges)
	observe(old)
	observe(nu)
	for _, tc := range []struct {
		name   string
		header http.Header
		target string
	}{
		{"plain", http.Header{}, "/v1/metrics"},
		{"gzip", http.Header{"Accept-Encoding": {"gzip"}}, "/v1/metrics"},
		{"identity preferred", http.Header{"Accept-Encoding": {"gzip;q=0.5, identity"}}, "/v1/metrics"},
		{"prometheus scrape", http.Header{"Accept": {"application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1"}, "Accept-Encoding": {"gzip"}}, "/v1/metrics"},
		{"some families", http.Header{}, "/v1/metrics?name[]=raft_apply&name[]=berth_volume_claims"},
	} {
		oresp, ob := serve(t, old.handler, tc.header, tc.target)
		nresp, nb := serve(t, nu.handler, tc.header, tc.target)
		if oresp.StatusCode != 200 || nresp.StatusCode != 200 {
			t.Fatalf("%s: status %d / %d", tc.name, oresp.StatusCode, nresp.StatusCode)
		}
		for _, h := range []string{"Content-Type", "Content-Encoding", "Vary"} {
			if o, n := oresp.Header.Values(h), nresp.Header.Values(h); !slicesEqual(o, n) {
				t.Errorf("%s: %s %q, client_golang's %q", tc.name, h, n, o)
			}
		}
		if !bytes.Equal(ob, nb) {
			t.Errorf("%s: answer differs from client_golang's:\n--- client_golang\n%s\n--- promtext\n%s", tc.name, ob, nb)
		}
	}
	if _, b := serve(t, nu.handler, http.Header{}, "/v1/metrics"); len(b) == 0 {
		t.Fatal("empty answer")
	}

	// A family collected with two help texts is refused by both.
	old.sink.SetGauge([]string{"berth", "heartbeats", "received", "total"}, 1)
	nu.sink.SetGauge([]string{"berth", "heartbeats", "received", "total"}, 1)
	oresp, _ := serve(t, old.handler, http.Header{}, "/v1/metrics")
	nresp, nb := serve(t, nu.handler, http.Header{}, "/v1/metrics")
	if oresp.StatusCode != 500 || nresp.StatusCode != 500 || !bytes.Contains(nb, []byte("An error has occurred while serving metrics")) {
		t.Fatalf("inconsistent family: status %d (client_golang %d): %s", nresp.StatusCode, oresp.StatusCode, nb)
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
