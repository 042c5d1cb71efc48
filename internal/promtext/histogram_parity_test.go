package promtext

import (
	"bytes"
	"math"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// A NaN observation counts in no bucket but +Inf's, as client_golang
// counts it, whether client_golang searches the bounds linearly (fewer
// than 35) or by binary search.
func TestHistogramNaNAsClientGolang(t *testing.T) {
	for _, n := range []int{3, 40} {
		bounds := ExponentialBuckets(0.001, 2, n)
		reg := prometheus.NewRegistry()
		old := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h", Help: "h", Buckets: bounds}, []string{"l"})
		reg.MustRegister(old)
		nu := NewHistogramVec("h", "h", bounds, "l")
		for _, v := range []float64{math.NaN(), 0, 0.001, math.NaN(), 1e9} {
			old.WithLabelValues("x").Observe(v)
			nu.WithLabelValues("x").Observe(v)
		}
		_, ob := serve(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), http.Header{}, "/")
		_, nb := serve(t, Handler(nu), http.Header{}, "/")
		if !bytes.Equal(ob, nb) {
			t.Errorf("%d bounds: answer differs from client_golang's:\n--- client_golang\n%s\n--- promtext\n%s", n, ob, nb)
		}
		if !bytes.Contains(nb, []byte(`h_bucket{l="x",le="0.001"} 2`)) {
			t.Errorf("%d bounds: NaN counted in the first bucket:\n%s", n, nb)
		}
	}
}

// Bounds must ascend strictly, as client_golang requires: a repeated or
// descending bound panics in both (client_golang at a vec's first series,
// promtext already when the vec is made); a trailing +Inf is accepted.
func TestHistogramBoundsAsClientGolang(t *testing.T) {
	panics := func(f func()) (p bool) {
		defer func() { p = recover() != nil }()
		f()
		return false
	}
	for _, bounds := range [][]float64{
		{1, 2, 3},
		{1, 2, math.Inf(1)},
		{1, 1, 2},
		{2, 1},
		{1, math.Inf(1), math.Inf(1)},
		{},
	} {
		old := panics(func() {
			prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h", Help: "h", Buckets: bounds}, nil).WithLabelValues()
		})
		nu := panics(func() { NewHistogramVec("h", "h", bounds) })
		if old != nu {
			t.Errorf("bounds %v: promtext panics %t, client_golang %t", bounds, nu, old)
		}
	}
	if !panics(func() { NewHistogramVec("h", "h", []float64{1, 1}) }) {
		t.Error("a repeated bound is accepted")
	}
}
