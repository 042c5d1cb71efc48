package endpoints

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/errcode"
)

// TestAllocUpdatesBatchRefusedWholeProposedAlone: a batched entry the
// state machine refuses whole (a part failed after writing) is proposed
// again part by part, so the innocent nodes' updates are applied and only
// the failing node gets its refusal, with its code.
func TestAllocUpdatesBatchRefusedWholeProposedAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFakeProposer()
		b := &allocUpdateBatcher{propose: p.propose, gate: func() error { return nil }}
		first := fillInflight(t, p, b)
		rest := submitAll(b, "n1", "n2", "n3")
		synctest.Wait()
		p.answer("x1", proposal{res: &fsm.ApplyResult{Index: 10}})
		poison := fmt.Errorf("AllocClientUpdate at index 12: part 2 of 3 of a batched client update (node %q) failed after writing: %w", "n2", fsm.ErrInvalidCommand)
		p.answer("batch", proposal{res: &fsm.ApplyResult{Index: 12, Err: poison}, err: poison})
		synctest.Wait()
		if n := len(p.commands()); n != 2+1+3 {
			p.answer("x2", proposal{res: &fsm.ApplyResult{Index: 11}})
			first()
			t.Fatalf("%d proposals, want the 2 in flight, the batch and its 3 parts alone; answers %v", n, rest())
		}
		own := fmt.Errorf("AllocClientUpdate at index 14: %w", fsm.ErrInvalidCommand)
		p.answer("n1", proposal{res: &fsm.ApplyResult{Index: 13}})
		p.answer("n2", proposal{res: &fsm.ApplyResult{Index: 14, Err: own}, err: own})
		p.answer("n3", proposal{res: &fsm.ApplyResult{Index: 15}})
		got := rest()
		for n, want := range map[string]uint64{"n1": 13, "n3": 15} {
			a := got[n]
			code := status.Code(errcode.Status(fmt.Errorf("recording alloc updates from node %s: %w", n, a.err)))
			if a.err != nil || a.index != want || errcode.Refusal.Has(code) {
				t.Errorf("%s: index %d, err %v (code %v); want applied alone at %d", n, a.index, a.err, code, want)
			}
		}
		if a := got["n2"]; !errors.Is(a.err, fsm.ErrInvalidCommand) || status.Code(errcode.Status(a.err)) != codes.InvalidArgument {
			t.Errorf("n2: index %d, err %v; want its own refusal", a.index, a.err)
		}
		for _, c := range p.commands()[3:] {
			if len(c.GetBatch()) > 0 {
				t.Errorf("proposed %v again as a batch", c)
			}
		}
		p.answer("x2", proposal{res: &fsm.ApplyResult{Index: 11}})
		first()
	})
}

// TestAllocUpdatesBatchNotCommittedNotProposedAgain: an entry that failed
// outside the state machine (leadership lost) is not proposed again part
// by part; the callers get the error and their clients send again.
func TestAllocUpdatesBatchNotCommittedNotProposedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFakeProposer()
		b := &allocUpdateBatcher{propose: p.propose, gate: func() error { return nil }}
		first := fillInflight(t, p, b)
		rest := submitAll(b, "n1", "n2")
		synctest.Wait()
		p.answer("x1", proposal{res: &fsm.ApplyResult{Index: 10}})
		p.answer("batch", proposal{err: fmt.Errorf("raft apply: %w", raft.ErrLeadershipLost)})
		for n, a := range rest() {
			if !errors.Is(a.err, raft.ErrLeadershipLost) {
				t.Errorf("%s: %v, want leadership lost", n, a.err)
			}
		}
		if n := len(p.commands()); n != 3 {
			t.Errorf("%d proposals, want the 2 in flight and the batch only", n)
		}
		p.answer("x2", proposal{res: &fsm.ApplyResult{Index: 11}})
		first()
	})
}
