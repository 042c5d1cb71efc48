package evals

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func brokerEval(id, job string, prio int32, createIndex uint64) *pb.Evaluation {
	return &pb.Evaluation{Id: id, JobId: job, Priority: prio, CreateIndex: createIndex, ModifyIndex: createIndex,
		Status: pb.EvalStatus_EVAL_STATUS_PENDING}
}

func newTestBroker(t *testing.T) (*Broker, *testutil.ManualClock) {
	t.Helper()
	clock := testutil.NewManualClock()
	b := newBroker(clock, brokerConfig{deliveryLimit: 3, nackDelay: time.Second, maxNackDelay: 4 * time.Second})
	b.SetEnabled(true)
	return b, clock
}

// mustDequeue takes the next ready evaluation, failing if none is ready.
func mustDequeue(t *testing.T, b *Broker) (*pb.Evaluation, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, token, err := b.dequeue(ctx)
	if err != nil {
		t.Fatalf("dequeue: %v", err)
	}
	return e, token
}

func requireNothingReady(t *testing.T, b *Broker) {
	t.Helper()
	if ready, _, _, _ := b.Stats(); ready != 0 {
		t.Fatalf("%d evaluations ready, want none", ready)
	}
}

func TestBrokerOrdersByPriorityThenAge(t *testing.T) {
	b, _ := newTestBroker(t)
	b.enqueue(brokerEval("e-old-low", "j1", 50, 1))
	b.enqueue(brokerEval("e-high", "j2", 80, 5))
	b.enqueue(brokerEval("e-new-low", "j3", 50, 3))
	var got []string
	for range 3 {
		e, _ := mustDequeue(t, b)
		got = append(got, e.GetId())
	}
	want := []string{"e-high", "e-old-low", "e-new-low"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}

func TestBrokerHandsOutOneEvalPerJob(t *testing.T) {
	b, _ := newTestBroker(t)
	b.enqueue(brokerEval("a1", "job-a", 50, 1))
	b.enqueue(brokerEval("a2", "job-a", 90, 2))
	b.enqueue(brokerEval("b1", "job-b", 50, 3))

	first, tok := mustDequeue(t, b)
	if first.GetId() != "a1" {
		t.Fatalf("first = %s, want a1 (a2 waits behind it although its priority is higher)", first.GetId())
	}
	second, tokB := mustDequeue(t, b)
	if second.GetId() != "b1" {
		t.Fatalf("second = %s, want b1: job-a already has an evaluation out", second.GetId())
	}
	requireNothingReady(t, b)
	if err := b.ack("a1", tok, 10); err != nil {
		t.Fatal(err)
	}
	third, _ := mustDequeue(t, b)
	if third.GetId() != "a2" {
		t.Fatalf("after ack got %s, want a2", third.GetId())
	}
	if err := b.ack("b1", tokB, 11); err != nil {
		t.Fatal(err)
	}
}

func TestBrokerIgnoresRepeatedAndFinishedSightings(t *testing.T) {
	b, _ := newTestBroker(t)
	e := brokerEval("e1", "j", 50, 1)
	b.enqueue(e)
	b.enqueue(e)
	got, tok := mustDequeue(t, b)
	b.enqueue(got) // seen again in state while outstanding
	requireNothingReady(t, b)
	if err := b.ack("e1", tok, 7); err != nil {
		t.Fatal(err)
	}
	// A snapshot taken before the eval's completion still shows it pending.
	b.enqueue(brokerEval("e1", "j", 50, 1))
	requireNothingReady(t, b)
	// Made pending again later (unblocked): new work.
	again := brokerEval("e1", "j", 50, 1)
	again.ModifyIndex = 9
	b.enqueue(again)
	if got, _ := mustDequeue(t, b); got.GetModifyIndex() != 9 {
		t.Fatalf("re-pended eval not handed out: %v", got)
	}
}

func TestBrokerNackBacksOffThenFailsAtDeliveryLimit(t *testing.T) {
	b, clock := newTestBroker(t)
	b.enqueue(brokerEval("e1", "j", 50, 1))
	b.enqueue(brokerEval("e2", "j", 50, 2))
	for delivery := 1; delivery <= 3; delivery++ {
		e, tok := mustDequeue(t, b)
		if e.GetId() != "e1" {
			t.Fatalf("delivery %d: got %s, want e1 (e2 must not overtake a nacked eval of its job)", delivery, e.GetId())
		}
		err := b.nack("e1", tok)
		if delivery < 3 {
			if err != nil {
				t.Fatalf("nack %d: %v", delivery, err)
			}
			requireNothingReady(t, b)
			backoff := time.Second << (delivery - 1)
			clock.Advance(backoff - time.Millisecond)
			requireNothingReady(t, b)
			clock.Advance(time.Millisecond)
			continue
		}
		if !errors.Is(err, errDeliveryLimit) {
			t.Fatalf("third nack = %v, want errDeliveryLimit", err)
		}
	}
	if e, _ := mustDequeue(t, b); e.GetId() != "e2" {
		t.Fatalf("after e1 failed got %s, want e2", e.GetId())
	}
}

func TestBrokerDelaysWaitUntil(t *testing.T) {
	b, clock := newTestBroker(t)
	e := brokerEval("later", "j", 50, 1)
	e.WaitUntil = clock.Now().Add(30 * time.Second).UnixNano()
	b.enqueue(e)
	requireNothingReady(t, b)
	clock.Advance(29 * time.Second)
	requireNothingReady(t, b)
	clock.Advance(time.Second)
	if got, _ := mustDequeue(t, b); got.GetId() != "later" {
		t.Fatalf("got %s", got.GetId())
	}
}

func TestBrokerTokensAndDisable(t *testing.T) {
	b, _ := newTestBroker(t)
	b.enqueue(brokerEval("e1", "j", 50, 1))
	_, tok := mustDequeue(t, b)
	if err := b.ack("e1", "wrong", 1); !errors.Is(err, ErrEvalToken) {
		t.Fatalf("ack with a wrong token = %v, want ErrEvalToken", err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, _, err := b.dequeue(context.Background())
		waiting <- err
	}()
	b.SetEnabled(false)
	select {
	case err := <-waiting:
		if !errors.Is(err, ErrBrokerDisabled) {
			t.Fatalf("waiting dequeue = %v, want ErrBrokerDisabled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting worker was not woken by disable")
	}
	if err := b.ack("e1", tok, 2); !errors.Is(err, ErrEvalToken) {
		t.Fatalf("ack after a leadership change = %v, want ErrEvalToken", err)
	}
	b.enqueue(brokerEval("e2", "j", 50, 2))
	b.SetEnabled(true)
	requireNothingReady(t, b) // enqueued while disabled: dropped, the new leader reads state
}

// TestBrokerHoldsAnEvalFailedAtItsLimitUntilForgotten: between the last
// nack and the failure record applying, the state still shows the
// evaluation pending; the feed's sighting then is not new work.
func TestBrokerHoldsAnEvalFailedAtItsLimitUntilForgotten(t *testing.T) {
	b, clock := newTestBroker(t)
	b.enqueue(brokerEval("e1", "j", 50, 1))
	b.enqueue(brokerEval("e2", "j", 50, 2))
	for delivery := 1; delivery <= 3; delivery++ {
		_, tok := mustDequeue(t, b)
		err := b.nack("e1", tok)
		if delivery < 3 {
			clock.Advance(time.Second << (delivery - 1))
			continue
		}
		if !errors.Is(err, errDeliveryLimit) {
			t.Fatalf("third nack = %v", err)
		}
	}
	if e, _ := mustDequeue(t, b); e.GetId() != "e2" {
		t.Fatalf("the job's next eval is %s, want e2 once e1 gave up", e.GetId())
	}
	b.enqueue(brokerEval("e1", "j", 50, 1)) // the feed, before the failure record applied
	requireNothingReady(t, b)
	b.forget("e1", 9) // recorded failed at index 9
	b.enqueue(brokerEval("e1", "j", 50, 1))
	requireNothingReady(t, b)
}

// TestBrokerPrunesWhatTheFeedHasReadPast: finished evaluations are
// remembered only until the feed reads a snapshot at or past their
// outcome, so a long leadership does not grow the broker.
func TestBrokerPrunesWhatTheFeedHasReadPast(t *testing.T) {
	b, _ := newTestBroker(t)
	for i := range 100 {
		e := brokerEval(fmt.Sprintf("e%03d", i), fmt.Sprintf("j%03d", i), 50, uint64(i+1))
		b.enqueue(e)
		got, tok := mustDequeue(t, b)
		if err := b.ack(got.GetId(), tok, uint64(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	b.prune(1049)
	b.mu.Lock()
	left := len(b.done)
	b.mu.Unlock()
	if left != 50 {
		t.Fatalf("%d finished evals remembered after pruning at 1049, want the 50 finished later", left)
	}
}

// TestBrokerHandsOutAnEvalMadePendingAgainWhileHeld: a blocked eval the
// feed made pending again before its worker acked is handed out after the
// ack, not lost until the next change.
func TestBrokerHandsOutAnEvalMadePendingAgainWhileHeld(t *testing.T) {
	b, _ := newTestBroker(t)
	b.enqueue(brokerEval("e1", "j", 50, 1))
	_, tok := mustDequeue(t, b)
	again := brokerEval("e1", "j", 50, 1)
	again.ModifyIndex = 12
	b.enqueue(again)
	requireNothingReady(t, b)
	if err := b.ack("e1", tok, 10); err != nil {
		t.Fatal(err)
	}
	if e, _ := mustDequeue(t, b); e.GetModifyIndex() != 12 {
		t.Fatalf("handed out %v, want e1 at modify index 12", e)
	}
}

// TestBrokerWakesBlockedEvalsInMemory pins wake, the feed's unblock
// without a raft write: a woken blocked evaluation is handed out once
// however often it is woken while held; woken while a worker has it, it is
// handed out again at the ack only if the worker planned from a state
// before the change that woke it; a wake from a sighting older than the
// evaluation's recorded outcome is stale, one of that outcome is new work
// (the evaluation blocked again, woken by a later change); nack and reset
// drop a pending second run.
func TestBrokerWakesBlockedEvalsInMemory(t *testing.T) {
	b, _ := newTestBroker(t)
	blocked := func(modify uint64) *pb.Evaluation {
		e := brokerEval("e1", "j", 50, 1)
		e.ModifyIndex = modify
		return e
	}
	b.wake(blocked(5), 8)
	b.wake(blocked(5), 9) // the feed again, before a worker took it
	got, tok := mustDequeue(t, b)
	requireNothingReady(t, b)
	if got.GetId() != "e1" {
		t.Fatalf("handed out %v, want e1", got)
	}
	// Woken again while the worker plans from index 10: a change at 9
	// it saw needs no second run.
	b.wake(blocked(5), 9)
	if err := b.ackPlanned("e1", tok, 12, 10); err != nil {
		t.Fatal(err)
	}
	requireNothingReady(t, b)

	// A stale sighting (the row before the outcome at 12) is ignored; the
	// row the outcome wrote, blocked again and woken by a later change,
	// is handed out.
	b.wake(blocked(5), 11)
	requireNothingReady(t, b)
	b.wake(blocked(12), 13)
	_, tok = mustDequeue(t, b)
	// A change at 15 after the worker's state at 14: handed out again at
	// the ack, once.
	b.wake(blocked(12), 15)
	b.wake(blocked(12), 15)
	requireNothingReady(t, b)
	if err := b.ackPlanned("e1", tok, 16, 14); err != nil {
		t.Fatal(err)
	}
	_, tok = mustDequeue(t, b)
	requireNothingReady(t, b)

	// A nack hands it out again later, planned from a fresh state: the
	// wake that came meanwhile makes no second run.
	b.wake(blocked(16), 20)
	if err := b.nack("e1", tok); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.wakeAgain["e1"]; ok {
		t.Fatal("a nacked evaluation keeps a second run")
	}
	b.SetEnabled(false)
	b.wake(blocked(16), 21)
	b.SetEnabled(true)
	requireNothingReady(t, b)
}
