package evals

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// A worker whose leadership ended takes nothing from a broker enabled
// again (its server leads again): dequeue refuses on the ended context
// before popping, and the evaluation stays for the new workers.
func TestDequeueRefusesAnEndedContextBeforeTaking(t *testing.T) {
	b, _ := newTestBroker(t)
	b.enqueue(brokerEval("e1", "j1", 50, 1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := b.dequeue(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("dequeue on an ended context: %v, want context.Canceled", err)
	}
	if ready, outstanding, _, _ := b.Stats(); ready != 1 || outstanding != 0 {
		t.Fatalf("ready %d outstanding %d, want the evaluation still ready", ready, outstanding)
	}
	if e, _ := mustDequeue(t, b); e.GetId() != "e1" {
		t.Fatalf("dequeued %s", e.GetId())
	}
}

// requeue hands an evaluation back ahead of its job's waiting ones, with
// no delivery counted and no backoff; a token from before a reset is
// ignored.
func TestRequeueHandsBackWithoutADelivery(t *testing.T) {
	b, _ := newTestBroker(t)
	b.enqueue(brokerEval("e1", "j1", 50, 1))
	b.enqueue(brokerEval("e2", "j1", 50, 2))
	for range 5 { // more than the delivery limit (3)
		e, tok := mustDequeue(t, b)
		if e.GetId() != "e1" {
			t.Fatalf("dequeued %s, want e1 back first", e.GetId())
		}
		requireNothingReady(t, b)
		b.requeue(e.GetId(), tok)
	}
	e, tok := mustDequeue(t, b)
	if err := b.nack(e.GetId(), tok); err != nil {
		t.Fatalf("nack after requeues: %v, want a backoff (requeues count no delivery)", err)
	}

	// A token from before a reset names nothing of the new leadership's.
	b2, _ := newTestBroker(t)
	b2.enqueue(brokerEval("e9", "j9", 50, 9))
	e, tok = mustDequeue(t, b2)
	b2.SetEnabled(false)
	b2.SetEnabled(true)
	b2.requeue(e.GetId(), tok)
	requireNothingReady(t, b2)
}

// ctxCore fails proposals once ctx ends, as raft's Apply does.
type ctxCore struct{ *fsmCore }

func (c ctxCore) ApplyResult(ctx context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.fsmCore.ApplyResult(ctx, t, msg)
}

func (c ctxCore) Apply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error) {
	r, err := c.ApplyResult(ctx, t, msg)
	if err != nil {
		return 0, err
	}
	return r.Index, nil
}

// A worker whose leadership ends while it plans hands the evaluation back
// (before: it returned with it outstanding, its job in flight, for the
// rest of the broker's life).
func TestWorkerHandsBackWhenItsLeadershipEnds(t *testing.T) {
	c, _ := blockedFixture(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	r := NewRunner(ctxCore{c}, Config{}, Hooks{BeforePlan: func(context.Context, *pb.Evaluation) { cancel() }})
	r.broker.SetEnabled(true)
	e := evalRow(t, c, "blocked")
	e.Status = pb.EvalStatus_EVAL_STATUS_PENDING
	r.broker.wake(e, c.index)
	r.worker(ctx, 0)
	if ready, outstanding, _, _ := r.broker.Stats(); ready != 1 || outstanding != 0 {
		t.Fatalf("after the worker ended: ready %d outstanding %d, want the evaluation ready again", ready, outstanding)
	}
}
