package endpoints

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// allocUpdateBatchSince is the first berth version whose servers apply an
// AllocClientUpdate entry that batches many nodes' updates (its batch
// field); an older one refuses it (it names no node).
var allocUpdateBatchSince = versions.MustConstraint(">= " + AllocUpdateBatchSinceVersion)

// AllocUpdateBatchSinceVersion is the version allocUpdateBatchSince names.
const AllocUpdateBatchSinceVersion = "0.1.0-dev.4"

// Bounds of one batched entry: its encoded parts, and how many entries
// are in flight at once (the next batch gathers while they commit).
const (
	allocUpdateBatchBytes    = 1 << 20
	allocUpdateBatchInflight = 2
)

// allocUpdateBatcher gathers the ClientAllocs.Update calls of many nodes
// into one raft entry, as Nomad's servers batch client updates. There is
// no batching interval: a call is proposed at once when fewer than
// allocUpdateBatchInflight entries are in flight, and otherwise waits for
// one of them with the calls that came meanwhile, which then go as one
// entry. At ten thousand nodes reporting at once that is tens of entries
// where it was ten thousand, each paying raft's encode, log write,
// replication and apply.
//
// Each caller still gets the answer its own command would have had: the
// entry's parts are applied one by one and a refused part changes nothing
// (fsm.applyAllocClientUpdateBatch), its refusal, naming the node and the
// alloc, returned to its caller alone. A part that fails after writing
// makes the state machine refuse the entry whole, having changed nothing;
// every part is then proposed again as its own command, so the other
// nodes' updates are applied and only that part's node is refused. A
// caller returns success only once the entry holding its updates is
// committed and applied; when the entry fails outside the state machine
// (leadership lost, shutdown, the batch's deadline) every caller in it
// gets the error and its client sends again. A caller whose context ended
// before its call was taken is not proposed.
type allocUpdateBatcher struct {
	// propose proposes one AllocClientUpdate command and waits for it.
	propose func(ctx context.Context, cmd *pb.AllocClientUpdateCommand) (*fsm.ApplyResult, error)
	// gate reports why a batched entry may not be proposed yet (a server
	// below allocUpdateBatchSince), nil when it may.
	gate func() error

	mu       sync.Mutex
	queue    []*queuedUpdate
	inflight int
}

// queuedUpdate is one caller's command and, once done is closed, its
// answer.
type queuedUpdate struct {
	ctx   context.Context
	cmd   *pb.AllocClientUpdateCommand
	done  chan struct{}
	index uint64
	err   error
}

// submit proposes cmd, in a batch with other nodes' when others wait, and
// returns the raft index it was applied at.
func (b *allocUpdateBatcher) submit(ctx context.Context, cmd *pb.AllocClientUpdateCommand) (uint64, error) {
	q := &queuedUpdate{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, q)
	if b.inflight < allocUpdateBatchInflight {
		b.inflight++
		go b.run()
	}
	b.mu.Unlock()
	select {
	case <-q.done:
		return q.index, q.err
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for the alloc updates of node %s (they may still be applied): %w", cmd.GetNodeId(), ctx.Err())
	}
}

// run proposes batches until none is waiting.
func (b *allocUpdateBatcher) run() {
	for {
		batch := b.take()
		if len(batch) == 0 {
			return
		}
		b.apply(batch)
	}
}

// take removes the next batch from the queue: the calls waiting, in the
// order they came, up to allocUpdateBatchBytes (at least one). A call
// whose caller has gone is answered with its context's error and left out.
// With nothing waiting it counts this runner out.
func (b *allocUpdateBatcher) take() []*queuedUpdate {
	b.mu.Lock()
	defer b.mu.Unlock()
	var batch []*queuedUpdate
	size, n := 0, 0
	for _, q := range b.queue {
		if err := q.ctx.Err(); err != nil {
			q.finish(0, fmt.Errorf("alloc updates of node %s not proposed: %w", q.cmd.GetNodeId(), err))
			n++
			continue
		}
		s := proto.Size(q.cmd)
		if len(batch) > 0 && size+s > allocUpdateBatchBytes {
			break
		}
		size += s
		batch = append(batch, q)
		n++
	}
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil
	}
	if len(batch) == 0 {
		b.inflight--
	}
	return batch
}

func (q *queuedUpdate) finish(index uint64, err error) {
	q.index, q.err = index, err
	close(q.done)
}

// apply proposes batch and answers each of its callers: one call as its
// own command, several as one batched entry, or, while a server is below
// allocUpdateBatchSince, each as its own command at once (raft still
// writes them together). A batched entry the state machine refused whole
// is proposed again that way.
func (b *allocUpdateBatcher) apply(batch []*queuedUpdate) {
	if len(batch) == 1 {
		q := batch[0]
		res, err := b.propose(q.ctx, q.cmd)
		q.finish(resultIndex(res), err)
		return
	}
	if b.gate() != nil {
		b.alone(batch)
		return
	}
	cmd := &pb.AllocClientUpdateCommand{Batch: make([]*pb.AllocClientUpdateCommand, len(batch))}
	for i, q := range batch {
		cmd.Batch[i] = q.cmd
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	res, err := b.propose(ctx, cmd)
	if err != nil && refusedWhole(res, err) {
		// Nothing of the entry was written: each part alone gets its
		// own answer, the failing one its error.
		b.alone(batch)
		return
	}
	if err != nil {
		for _, q := range batch {
			q.finish(0, fmt.Errorf("alloc updates of node %s, proposed with %d other nodes': %w", q.cmd.GetNodeId(), len(batch)-1, err))
		}
		return
	}
	refused := map[uint32]*pb.AllocClientUpdateRefusal{}
	if r, ok := res.Response.(*pb.AllocClientUpdateBatchResult); ok {
		for _, rf := range r.GetRefusals() {
			refused[rf.GetPart()] = rf
		}
	}
	for i, q := range batch {
		if rf := refused[uint32(i)]; rf != nil {
			q.finish(0, status.Error(codes.Code(rf.GetCode()), rf.GetError()))
			continue
		}
		q.finish(res.Index, nil)
	}
}

// alone proposes each call of batch as its own command, all at once (raft
// still writes them together), each under its caller's context, and
// answers each its own result.
func (b *allocUpdateBatcher) alone(batch []*queuedUpdate) {
	var wg sync.WaitGroup
	for _, q := range batch {
		wg.Go(func() {
			res, err := b.propose(q.ctx, q.cmd)
			q.finish(resultIndex(res), err)
		})
	}
	wg.Wait()
}

// refusedWhole reports whether err, from proposing a batched entry, is the
// state machine's refusal of it (res.Err, the entry applied and changing
// nothing), not a failure to commit or wait for it.
func refusedWhole(res *fsm.ApplyResult, err error) bool {
	return res != nil && res.Err != nil && errors.Is(err, res.Err)
}

// batchContext is the context a batched entry is proposed under: not any
// one caller's (one leaving must not fail the others), with the latest of
// their deadlines when every caller has one.
func batchContext(batch []*queuedUpdate) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, q := range batch {
		d, ok := q.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

func resultIndex(res *fsm.ApplyResult) uint64 {
	if res == nil {
		return 0
	}
	return res.Index
}

// newAllocUpdateBatcher is the batcher of a server's endpoints.
func newAllocUpdateBatcher(deps Deps) *allocUpdateBatcher {
	return &allocUpdateBatcher{
		propose: func(ctx context.Context, cmd *pb.AllocClientUpdateCommand) (*fsm.ApplyResult, error) {
			return deps.ApplyResult(ctx, fsm.AllocClientUpdate, cmd)
		},
		gate: func() error {
			return deps.RequireServersAt(allocUpdateBatchSince, AllocUpdateBatchSinceVersion, "batched alloc updates")
		},
	}
}
