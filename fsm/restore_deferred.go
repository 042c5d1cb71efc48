package fsm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// A follower that installs the leader's snapshot (raft's InstallSnapshot)
// answers the leader only once its FSM's Restore returns, and the leader
// of an operator's restore waits for a follower's answer (raft's Restore
// commits a no-op after it). Decoding the state of 10,000 nodes running a
// 10,000-alloc job (14.4 MiB) took the followers 2.5–4.6 s on this loaded
// 2-core machine, after the leader's own 0.8–2.2 s check: the restore took
// 3.1–5.5 s end to end (nodesim -snapshot). What raft needs from the
// follower before it answers is the snapshot durable on its disk (raft's
// snapshot store, CRC-checked when raft opens it), not the state decoded.
//
// So, once DeferRestores is on, Restore reads the stream into memory,
// checks its header and its framing to the end record (what a truncated
// or foreign stream breaks), and returns; the rows are decoded and the
// store swapped in by a goroutine of their own. Until then the applies,
// snapshots and later restores wait for it, and so does a new leader's
// start (WaitRestored after its barrier): none acts on the replaced state
// after raft counts the snapshot installed. Readers (State) go on reading
// the replaced store meanwhile, as they did while a restore decoded before
// returning: a follower's reads may be stale (they never block: the first
// nodesim run of this blocked them, and heartbeats forwarded through the
// followers waited 6-10 s), and blocking queries wake once the restored
// store is swapped in. Raft's main loop (heartbeats, appends, votes) is
// not held meanwhile.
//
// What only the decoding finds (a row that does not decode or store: a
// stream with the right framing and the wrong bytes, which raft's CRC
// makes all but impossible) leaves the FSM with a state raft counts as
// installed that it does not hold. restoreFailed logs it at Error (the
// snapshot's id and index, the row's error) and ends the process; the
// applies and snapshots waiting for the decoding stay blocked until then,
// so none acts on the replaced store (a raft snapshot taken then would
// pair raft's installed index with the old rows). It does not heal by
// itself: raft keeps two snapshots and at start-up skips one that fails
// to restore for the older one, whose later entries the leader may have
// compacted, so the leader sends the same snapshot again and the
// follower most likely stops again, in a loop, until an operator acts
// (removes the server's raft data, or restores a good snapshot on the
// leader). The state is never silently behind raft. Once the FSM is
// closed (Close: the server is shutting down), a failing decoding is only
// logged, and whoever waits for it is released with its error (Snapshot
// refuses), so raft's own shutdown is not held.
//
// Streams over maxDeferredRestore bytes, version 1 streams, RestoreStrict
// and a restore offered a checked store (the leader's, of an operator's
// upload, whose caller reads the state once raft returns) are decoded
// synchronously, as before.

// maxDeferredRestore is the largest stream a Restore holds in memory to
// decode it after returning; a larger one is decoded as it is read, having
// buffered no more than this. A variable for tests.
var maxDeferredRestore int64 = 128 << 20

// deferredChunk is the size of the pieces a deferred restore reads its
// stream into: fixed, so a large stream is never copied to a buffer twice
// its size as it grows.
const deferredChunk = 1 << 20

// pendingRestore is a deferred restore still decoding: done closes once
// its store is swapped in, or once its decoding failed after the FSM was
// closed or under a test's hook (err then says why).
type pendingRestore struct {
	done chan struct{}
	err  error
	// about names the snapshot (DescribeRestores) for the logs.
	about []any
}

// DeferRestores turns deferred decoding of non-strict restores on or off
// (off by default). A server turns it on once raft has started, so the
// restore of its own snapshot at start-up stays synchronous.
func (f *FSM) DeferRestores(on bool) { f.deferring.Store(on) }

// DescribeRestores sets what names the snapshot being restored in the
// logs of a deferred restore (a server: raft's newest snapshot's id,
// index and term), as key/value pairs; it is called when Restore starts.
func (f *FSM) DescribeRestores(describe func() []any) { f.describeRestore = describe }

// SetDeferredDecodeHook sets what runs before a deferred restore's
// decoding starts, on its goroutine (server tests hold a decoding with
// it); nil outside tests. Set it before raft starts.
func (f *FSM) SetDeferredDecodeHook(hook func()) { f.deferredHook = hook }

// Close stops the FSM from ending the process: a deferred restore whose
// decoding fails from now on is only logged. A server calls it when it
// shuts down.
func (f *FSM) Close() { f.closed.Store(true) }

// waitRestored returns once no deferred restore is decoding, with the
// error of one whose decoding failed (after Close, or under a test hook).
func (f *FSM) waitRestored() error {
	if p := f.pending.Load(); p != nil {
		<-p.done
		return p.err
	}
	return nil
}

// WaitRestored returns true once no restore raft counted as done is still
// decoding, so State holds every entry raft has applied; false if ctx
// ends first or the decoding failed. A server that just became leader
// waits for it after its barrier, before its duties read the state.
func (f *FSM) WaitRestored(ctx context.Context) bool {
	p := f.pending.Load()
	if p == nil {
		return true
	}
	select {
	case <-p.done:
		return p.err == nil
	case <-ctx.Done():
		return false
	}
}

// restoreDeferred reads r's whole stream and, if it can be decoded after
// returning, checks its header and framing and starts decoding it,
// reporting true. Otherwise (too large, version 1) it reports false and
// returns a reader yielding the whole stream again, to decode now.
func (f *FSM) restoreDeferred(r io.Reader) (bool, io.Reader, error) {
	chunks, over, err := readChunks(r, maxDeferredRestore)
	if err != nil {
		return false, nil, err
	}
	if over {
		return false, io.MultiReader(chunksReader(chunks), r), nil
	}
	v, err := checkFraming(chunksReader(chunks))
	if err != nil {
		return false, nil, err
	}
	if v < 2 {
		return false, chunksReader(chunks), nil
	}
	p := &pendingRestore{done: make(chan struct{})}
	if d := f.describeRestore; d != nil {
		p.about = d()
	}
	f.pending.Store(p)
	go func() {
		if h := f.deferredHook; h != nil {
			h()
		}
		restored, err := f.readSnapshot(chunksReader(chunks), false)
		if err != nil {
			f.restoreFailed(p, err)
			return
		}
		// Only a store swapped in releases the waiters: were they let go
		// on a failure, they would act on the replaced store.
		f.swapIn(restored, "decoded_after_install", true)
		f.pending.Store(nil)
		close(p.done)
	}()
	return true, nil, nil
}

// readChunks reads r into pieces of deferredChunk bytes until its end,
// or until it has read more than limit bytes (over).
func readChunks(r io.Reader, limit int64) (chunks [][]byte, over bool, err error) {
	var total int64
	for {
		c := make([]byte, deferredChunk)
		n, err := io.ReadFull(r, c)
		if n > 0 {
			chunks = append(chunks, c[:n])
			total += int64(n)
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return chunks, total > limit, nil
		case err != nil:
			return nil, false, err
		case total > limit:
			return chunks, true, nil
		}
	}
}

// chunksReader reads the chunks in order.
func chunksReader(chunks [][]byte) io.Reader {
	rs := make([]io.Reader, len(chunks))
	for i, c := range chunks {
		rs[i] = bytes.NewReader(c)
	}
	return io.MultiReader(rs...)
}

// restoreFailed is a deferred restore's decoding failing: the state raft
// counts as installed is not the FSM's. It logs it and ends the process
// (see above), its waiters still blocked; once the FSM is closed, or
// under a test's hook, it releases them with the error instead.
func (f *FSM) restoreFailed(p *pendingRestore, err error) {
	args := append([]any{"error", err}, p.about...)
	if f.closed.Load() {
		f.logger.Error("snapshot raft installed does not decode; the server is shutting down", args...)
		p.err = err
		close(p.done)
		return
	}
	f.logger.Error("snapshot raft installed does not decode: the state is not what raft holds, so the server stops (it will most likely stop again on the same snapshot from the leader: see its rows' error)", args...)
	if h := f.deferredFailed; h != nil {
		h(err)
		p.err = err
		close(p.done)
		return
	}
	panic(fmt.Sprintf("berth: snapshot installed by raft does not decode (%v); the state is not what raft holds, so the server stops", err))
}

// checkFraming checks a whole stream's header and framing: every record's
// length prefix within the stream, and, for version 2 on, a last record
// that is the end record counting the records before it. It returns the
// stream's version.
func checkFraming(r io.Reader) (uint32, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	v, err := readHeader(br)
	if err != nil {
		return 0, err
	}
	if v < 2 {
		return v, nil
	}
	var records uint64
	var last []byte
	for {
		size, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("%w: record %d: length prefix cut off", ErrSnapshotCorrupt, records+1)
		}
		if size > maxSnapshotRecord {
			return 0, fmt.Errorf("%w: record %d: record of %d bytes over the limit", ErrSnapshotCorrupt, records+1, size)
		}
		// Every record is read into one buffer: only the last is kept.
		if uint64(cap(last)) < size {
			last = make([]byte, size)
		}
		last = last[:size]
		if _, err := io.ReadFull(br, last); err != nil {
			return 0, fmt.Errorf("%w: record %d: record of %d bytes cut off", ErrSnapshotCorrupt, records+1, size)
		}
		records++
	}
	var rec pb.SnapshotRecord
	if records == 0 || proto.Unmarshal(last, &rec) != nil || rec.GetEnd() == nil {
		return 0, fmt.Errorf("%w: stream ends after %d records without its end record (truncated)", ErrSnapshotCorrupt, records)
	}
	if got := rec.GetEnd().GetRecords(); got != records-1 {
		return 0, fmt.Errorf("%w: end record counts %d records, the stream holds %d", ErrSnapshotCorrupt, got, records-1)
	}
	return v, nil
}
