package main

import (
	"testing"
	"time"
)

// TestRaftTLSRowControl: a row's ratios are the medians of the per-round
// ratios, TLS's and the control's each over the plain arm of its round.
func TestRaftTLSRowControl(t *testing.T) {
	res := func(ops int, p50 time.Duration) loadResult {
		return loadResult{ops: ops, elapsed: time.Second, lat: []time.Duration{p50, p50, p50}}
	}
	m := &raftTLSMeasure{runs: map[string]map[int][]loadResult{
		"plain":   {1: {res(100, 2*time.Millisecond), res(200, time.Millisecond), res(100, 4*time.Millisecond)}},
		"tls":     {1: {res(90, 2*time.Millisecond), res(100, 2*time.Millisecond), res(100, 4*time.Millisecond)}},
		"control": {1: {res(50, 4*time.Millisecond), res(200, time.Millisecond), res(300, time.Millisecond)}},
	}}
	r := m.row(1)
	if r.thrRatio != 0.9 || r.latRatio != 1 {
		t.Errorf("TLS/plain: throughput %v, p50 %v; want 0.9, 1", r.thrRatio, r.latRatio)
	}
	if r.ctlThrRatio != 1 || r.ctlLatRatio != 1 {
		t.Errorf("control/plain: throughput %v, p50 %v; want 1, 1", r.ctlThrRatio, r.ctlLatRatio)
	}
	if r.plainOps != 100 || r.tlsOps != 100 {
		t.Errorf("medians: plain %v, TLS %v ops/s; want 100, 100", r.plainOps, r.tlsOps)
	}
}
