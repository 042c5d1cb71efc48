package fsm

import (
	"bufio"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
)

// Decoding a snapshot's records — protobuf rows with maps and strings —
// is most of a restore's work, and each record decodes on its own; storing
// them (one memdb transaction, keys checked in order) cannot be shared.
// So with more than two cores the records are read in batches, decoded by
// decodeWorkers goroutines, and stored in stream order as each batch is
// done: a follower installing the leader's snapshot, or a leader checking
// an operator's upload, decodes on the cores raft does not need while it
// stores.
const (
	// decodeBatchRecords and decodeBatchBytes bound a batch: small enough
	// that the store starts soon, large enough that handing it over costs
	// nothing beside decoding it.
	decodeBatchRecords = 256
	decodeBatchBytes   = 1 << 20
	// maxDecodeWorkers bounds the decoders however many cores there are.
	maxDecodeWorkers = 8
)

// Every batch's decoders and its store yield the processor when done
// (runtime.Gosched): a restore runs while raft's heartbeats must still be
// answered within the leader lease, and a goroutine that never yields
// makes a waiting one queue for the scheduler's 10 ms time slice, many
// times over on a loaded machine.

// decodeWorkers is how many goroutines decode a restore's records: one
// per core but two, up to maxDecodeWorkers, so that with the goroutine
// storing them one core stays free for raft's heartbeats. A follower
// installing a snapshot must still answer the leader's heartbeats within
// its lease, or the leader steps down and the operator's restore fails
// (nodesim, 5,000 nodes on 2 loaded cores: both followers unanswered for
// over a second while they decoded). With 2 cores or fewer (or set to 1
// by a test) records are decoded where they are stored.
var decodeWorkers atomic.Int32

func init() { decodeWorkers.Store(int32(min(runtime.GOMAXPROCS(0)-2, maxDecodeWorkers))) }

// recordBatch is a run of consecutive records: their encodings, then,
// once done is closed, their decodings. end is what reading stopped on
// after them (io.EOF at the clean end of the stream), nil if more follow.
type recordBatch struct {
	bufs [][]byte
	out  []decodedRecord
	end  error
	done chan struct{}
}

// readRecords reads and stores every record after the header, then checks
// the stream was complete (finish). Its errors are ErrSnapshotCorrupt
// naming the record, counted from 1 after the header, exactly as a
// sequential read would report the first bad record.
func (rs *restoring) readRecords(br *bufio.Reader) error {
	workers := int(decodeWorkers.Load())
	if workers <= 1 {
		for n := 1; ; n++ {
			buf, err := readDelimited(br)
			if err == io.EOF {
				return rs.finished()
			}
			if err != nil {
				return fmt.Errorf("%w: record %d: %w", ErrSnapshotCorrupt, n, err)
			}
			if err := rs.record(buf); err != nil {
				return fmt.Errorf("%w: record %d: %w", ErrSnapshotCorrupt, n, err)
			}
			if n%decodeBatchRecords == 0 {
				runtime.Gosched()
			}
		}
	}
	quit := make(chan struct{})
	defer close(quit)
	// The reader is the only user of br. It is not waited for: after an
	// error it may be blocked reading a stream the caller closes next.
	work := make(chan *recordBatch, workers)
	order := make(chan *recordBatch, 2*workers)
	go readBatches(br, work, order, quit)
	for range workers {
		go func() {
			for b := range work {
				for i, buf := range b.bufs {
					b.out[i] = decodeRecord(rs.schema, rs.version, buf)
				}
				close(b.done)
				runtime.Gosched()
			}
		}()
	}
	n := 0
	for b := range order {
		<-b.done
		for _, d := range b.out {
			n++
			if err := rs.store(d); err != nil {
				return fmt.Errorf("%w: record %d: %w", ErrSnapshotCorrupt, n, err)
			}
		}
		runtime.Gosched()
		switch {
		case b.end == io.EOF:
			return rs.finished()
		case b.end != nil:
			return fmt.Errorf("%w: record %d: %w", ErrSnapshotCorrupt, n+1, b.end)
		}
	}
	return nil // not reached: the reader ends every stream with a batch holding end
}

// readBatches reads records into batches, handing each to the decoders
// (work) and, in stream order, to the store (order), until the stream
// ends or fails — the last batch says which — or quit closes.
func readBatches(br *bufio.Reader, work, order chan<- *recordBatch, quit <-chan struct{}) {
	defer close(work)
	defer close(order)
	for {
		b := &recordBatch{done: make(chan struct{})}
		size := 0
		for len(b.bufs) < decodeBatchRecords && size < decodeBatchBytes {
			buf, err := readDelimited(br)
			if err != nil {
				b.end = err
				break
			}
			b.bufs = append(b.bufs, buf)
			size += len(buf)
		}
		b.out = make([]decodedRecord, len(b.bufs))
		for _, ch := range []chan<- *recordBatch{order, work} {
			select {
			case ch <- b:
			case <-quit:
				return
			}
		}
		if b.end != nil {
			return
		}
	}
}

// finished is finish at the end of the stream, as ErrSnapshotCorrupt.
func (rs *restoring) finished() error {
	if err := rs.finish(); err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshotCorrupt, err)
	}
	return nil
}
