package endpoints

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// fakeProposer records the commands proposed and answers each when the
// test releases it: a node's own command by its node ID, a batched one
// as "batch".
type fakeProposer struct {
	mu       sync.Mutex
	proposed []*pb.AllocClientUpdateCommand
	release  map[string]chan proposal
}

type proposal struct {
	res *fsm.ApplyResult
	err error
}

func newFakeProposer() *fakeProposer { return &fakeProposer{release: map[string]chan proposal{}} }

func (p *fakeProposer) ch(key string) chan proposal {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.release[key]
	if c == nil {
		c = make(chan proposal)
		p.release[key] = c
	}
	return c
}

// answer answers the proposal of key (blocking until it is made).
func (p *fakeProposer) answer(key string, r proposal) { p.ch(key) <- r }

func (p *fakeProposer) propose(ctx context.Context, cmd *pb.AllocClientUpdateCommand) (*fsm.ApplyResult, error) {
	p.mu.Lock()
	p.proposed = append(p.proposed, cmd)
	p.mu.Unlock()
	key := cmd.GetNodeId()
	if len(cmd.GetBatch()) > 0 {
		key = "batch"
	}
	select {
	case r := <-p.ch(key):
		return r.res, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *fakeProposer) commands() []*pb.AllocClientUpdateCommand {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*pb.AllocClientUpdateCommand(nil), p.proposed...)
}

type answer struct {
	index uint64
	err   error
}

// submitAll submits one command per node, each from its own goroutine,
// and returns their answers by node once all have one.
func submitAll(b *allocUpdateBatcher, nodes ...string) func() map[string]answer {
	var mu sync.Mutex
	out := map[string]answer{}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			idx, err := b.submit(context.Background(), &pb.AllocClientUpdateCommand{NodeId: n,
				Updates: []*pb.AllocClientUpdate{{AllocId: "a-" + n, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING}}})
			mu.Lock()
			out[n] = answer{idx, err}
			mu.Unlock()
		})
	}
	return func() map[string]answer { wg.Wait(); return out }
}

// fillInflight submits from nodes x1 and x2 and waits until both are
// proposed alone and held, so what comes next queues.
func fillInflight(t *testing.T, p *fakeProposer, b *allocUpdateBatcher) func() map[string]answer {
	t.Helper()
	wait := submitAll(b, "x1")
	synctest.Wait()
	wait2 := submitAll(b, "x2")
	synctest.Wait()
	if got := len(p.commands()); got != allocUpdateBatchInflight {
		t.Fatalf("%d proposals in flight, want %d", got, allocUpdateBatchInflight)
	}
	return func() map[string]answer {
		m := wait()
		for k, v := range wait2() {
			m[k] = v
		}
		return m
	}
}

// TestAllocUpdatesWaitingGoAsOneEntry: updates that come while entries
// are in flight are proposed together as one batched entry once one
// commits, each caller answered with its index; a part the entry refused
// is answered to its caller alone, with its code and the words naming the
// node and alloc.
func TestAllocUpdatesWaitingGoAsOneEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFakeProposer()
		b := &allocUpdateBatcher{propose: p.propose, gate: func() error { return nil }}
		first := fillInflight(t, p, b)
		nodes := []string{"n1", "n2", "n3", "n4", "n5"}
		rest := submitAll(b, nodes...)
		synctest.Wait()
		p.answer("x1", proposal{res: &fsm.ApplyResult{Index: 10}})
		p.answer("x2", proposal{res: &fsm.ApplyResult{Index: 11}})
		synctest.Wait()
		cmds := p.commands()
		if len(cmds) != 3 {
			t.Fatalf("%d proposals, want the 2 in flight and one batch", len(cmds))
		}
		batch := cmds[2].GetBatch()
		if cmds[2].GetNodeId() != "" || len(batch) != len(nodes) {
			t.Fatalf("third proposal %v, want one entry batching %d nodes", cmds[2], len(nodes))
		}
		refusedPart := -1
		for i, part := range batch {
			if part.GetNodeId() == "n3" {
				refusedPart = i
			}
		}
		msg := `node "n3" reported on alloc "a-n3", which is on node "n1": allocation belongs to another node`
		p.answer("batch", proposal{res: &fsm.ApplyResult{Index: 12, Response: &pb.AllocClientUpdateBatchResult{Refusals: []*pb.AllocClientUpdateRefusal{
			{Part: uint32(refusedPart), Code: uint32(codes.InvalidArgument), Error: msg}}}}})
		got := rest()
		for _, n := range nodes {
			a := got[n]
			if n == "n3" {
				if status.Code(a.err) != codes.InvalidArgument || !strings.Contains(a.err.Error(), msg) || a.index != 0 {
					t.Errorf("n3: index %d, err %v; want its refusal, InvalidArgument", a.index, a.err)
				}
				continue
			}
			if a.err != nil || a.index != 12 {
				t.Errorf("%s: index %d, err %v; want applied at 12", n, a.index, a.err)
			}
		}
		if f := first(); f["x1"].err != nil || f["x2"].err != nil {
			t.Errorf("in-flight proposals: %v", f)
		}
	})
}

// TestAllocUpdatesBatchFailureFailsEveryCaller: when the batched entry is
// not committed (leadership lost), no caller in it is told success.
func TestAllocUpdatesBatchFailureFailsEveryCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFakeProposer()
		b := &allocUpdateBatcher{propose: p.propose, gate: func() error { return nil }}
		first := fillInflight(t, p, b)
		rest := submitAll(b, "n1", "n2", "n3")
		synctest.Wait()
		p.answer("x1", proposal{res: &fsm.ApplyResult{Index: 10}})
		p.answer("batch", proposal{err: fmt.Errorf("raft apply: %w", raft.ErrLeadershipLost)})
		for n, a := range rest() {
			if !errors.Is(a.err, raft.ErrLeadershipLost) || !strings.Contains(a.err.Error(), n) {
				t.Errorf("%s: index %d, err %v; want leadership lost, naming the node", n, a.index, a.err)
			}
		}
		p.answer("x2", proposal{res: &fsm.ApplyResult{Index: 11}})
		first()
	})
}

// TestAllocUpdatesBelowGateGoAlone: while a server is below the batch's
// version gate, waiting updates are proposed each as its own command.
func TestAllocUpdatesBelowGateGoAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFakeProposer()
		b := &allocUpdateBatcher{propose: p.propose, gate: func() error { return &GateRefusal{Msg: "server s3 runs 0.1.0-dev.3"} }}
		first := fillInflight(t, p, b)
		rest := submitAll(b, "n1", "n2", "n3")
		synctest.Wait()
		p.answer("x1", proposal{res: &fsm.ApplyResult{Index: 10}})
		for i, n := range []string{"n1", "n2", "n3"} {
			p.answer(n, proposal{res: &fsm.ApplyResult{Index: uint64(20 + i)}})
		}
		for n, a := range rest() {
			if a.err != nil || a.index < 20 {
				t.Errorf("%s: index %d, err %v", n, a.index, a.err)
			}
		}
		for _, c := range p.commands() {
			if len(c.GetBatch()) > 0 || c.GetNodeId() == "" {
				t.Errorf("proposed %v below the gate, want one node's command", c)
			}
		}
		p.answer("x2", proposal{res: &fsm.ApplyResult{Index: 11}})
		first()
	})
}

// TestAllocUpdateOfAGoneCallerNotProposed: a caller that gave up before
// its update was taken is answered with its context's error and its
// update is not proposed.
func TestAllocUpdateOfAGoneCallerNotProposed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFakeProposer()
		b := &allocUpdateBatcher{propose: p.propose, gate: func() error { return nil }}
		first := fillInflight(t, p, b)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := b.submit(ctx, &pb.AllocClientUpdateCommand{NodeId: "gone"})
			done <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("gone caller: %v", err)
		}
		rest := submitAll(b, "n1")
		synctest.Wait()
		p.answer("x1", proposal{res: &fsm.ApplyResult{Index: 10}})
		p.answer("n1", proposal{res: &fsm.ApplyResult{Index: 12}})
		if a := rest()["n1"]; a.err != nil || a.index != 12 {
			t.Errorf("n1: %v", a)
		}
		for _, c := range p.commands() {
			if c.GetNodeId() == "gone" {
				t.Errorf("the gone caller's update was proposed")
			}
		}
		p.answer("x2", proposal{res: &fsm.ApplyResult{Index: 11}})
		first()
	})
}
