package evals

import (
	"math"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// An evaluation's latency runs from when it became ready, waiting behind
// its job included, to its ack or nack; a nacked one starts again when its
// backoff returns it.
func TestBrokerEvalLatency(t *testing.T) {
	const name = "berth_eval_duration_seconds"
	ack, nack := map[string]string{"result": "ack"}, map[string]string{"result": "nack"}
	ackN, ackSum := testutil.MetricValue(t, name, ack, Metrics()...), testutil.HistogramSum(t, name, ack, Metrics()...)
	nackN, nackSum := testutil.MetricValue(t, name, nack, Metrics()...), testutil.HistogramSum(t, name, nack, Metrics()...)

	b, clock := newTestBroker(t)
	b.enqueue(brokerEval("e1", "j", 50, 1))
	b.enqueue(brokerEval("e2", "j", 50, 2)) // parked behind e1
	clock.Advance(2 * time.Second)
	_, tok := mustDequeue(t, b)
	clock.Advance(time.Second)
	if err := b.nack("e1", tok); err != nil { // 3 s
		t.Fatal(err)
	}
	clock.Advance(time.Second) // the first nack's backoff
	_, tok = mustDequeue(t, b)
	clock.Advance(4 * time.Second)
	if err := b.ack("e1", tok, 10); err != nil { // 4 s since it returned
		t.Fatal(err)
	}
	_, tok = mustDequeue(t, b)
	if err := b.ack("e2", tok, 11); err != nil { // 3+1+4 = 8 s since enqueued
		t.Fatal(err)
	}

	if n, sum := testutil.MetricValue(t, name, ack, Metrics()...)-ackN, testutil.HistogramSum(t, name, ack, Metrics()...)-ackSum; n != 2 || !near(sum, 12) {
		t.Errorf("acks: %v samples summing to %v s, want 2 summing to 12 s", n, sum)
	}
	if n, sum := testutil.MetricValue(t, name, nack, Metrics()...)-nackN, testutil.HistogramSum(t, name, nack, Metrics()...)-nackSum; n != 1 || !near(sum, 3) {
		t.Errorf("nacks: %v samples summing to %v s, want 1 summing to 3 s", n, sum)
	}
}

// near compares seconds summed in a float histogram: the sums are read as
// differences from what earlier tests in the package recorded, so they
// carry rounding (11.999999999999998 for 12).
func near(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
