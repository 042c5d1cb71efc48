package fsm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
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
// installed that it does not hold: restoreFailed ends the process, and on
// its next start raft restores the snapshot from its disk synchronously,
// where the same failure stops it with the error (the state is never
// silently behind raft).
//
// Streams over maxDeferredRestore bytes, version 1 streams, RestoreStrict
// and a restore offered a checked store (the leader's, of an operator's
// upload, whose caller reads the state once raft returns) are decoded
// synchronously, as before.

// maxDeferredRestore is the largest stream a Restore holds in memory to
// decode it after returning. A variable for tests.
var maxDeferredRestore int64 = 512 << 20

// pendingRestore is a deferred restore still decoding: done closes once
// its store is swapped in.
type pendingRestore struct {
	done chan struct{}
}

// DeferRestores turns deferred decoding of non-strict restores on or off
// (off by default). A server turns it on once raft has started, so the
// restore of its own snapshot at start-up stays synchronous.
func (f *FSM) DeferRestores(on bool) { f.deferring.Store(on) }

// waitRestored returns once no deferred restore is decoding.
func (f *FSM) waitRestored() {
	if p := f.pending.Load(); p != nil {
		<-p.done
	}
}

// WaitRestored returns true once no restore raft counted as done is still
// decoding, so State holds every entry raft has applied; false if ctx
// ends first. A server that just became leader waits for it after its
// barrier, before its duties read the state.
func (f *FSM) WaitRestored(ctx context.Context) bool {
	p := f.pending.Load()
	if p == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// restoreDeferred reads r's whole stream and, if it can be decoded after
// returning, checks its header and framing and starts decoding it,
// reporting true. Otherwise (too large, version 1) it reports false and
// returns a reader yielding the whole stream again, to decode now.
func (f *FSM) restoreDeferred(r io.Reader) (bool, io.Reader, error) {
	buf, err := io.ReadAll(io.LimitReader(r, maxDeferredRestore+1))
	if err != nil {
		return false, nil, err
	}
	if int64(len(buf)) > maxDeferredRestore {
		return false, io.MultiReader(bytes.NewReader(buf), r), nil
	}
	v, err := checkFraming(buf)
	if err != nil {
		return false, nil, err
	}
	if v < 2 {
		return false, bytes.NewReader(buf), nil
	}
	p := &pendingRestore{done: make(chan struct{})}
	f.pending.Store(p)
	go func() {
		defer close(p.done)
		defer f.pending.Store(nil)
		if h := f.deferredHook; h != nil {
			h()
		}
		restored, err := f.readSnapshot(bytes.NewReader(buf), false)
		if err != nil {
			f.restoreFailed(err)
			return
		}
		f.swapIn(restored, "decoded_after_install", true)
	}()
	return true, nil, nil
}

// restoreFailed is a deferred restore's decoding failing: the state raft
// counts as installed is not the FSM's. It ends the process (see above),
// unless a test replaced it.
func (f *FSM) restoreFailed(err error) {
	f.logger.Error("snapshot raft installed does not decode: stopping, so raft restores it from disk at the next start", "error", err)
	if h := f.deferredFailed; h != nil {
		h(err)
		return
	}
	panic(fmt.Sprintf("berth: snapshot installed by raft does not decode (%v); the state is not what raft holds, so the server stops", err))
}

// checkFraming checks a whole stream's header and framing: every record's
// length prefix within the stream, and, for version 2 on, a last record
// that is the end record counting the records before it. It returns the
// stream's version.
func checkFraming(buf []byte) (uint32, error) {
	rd := bytes.NewReader(buf)
	br := bufio.NewReader(rd)
	v, err := readHeader(br)
	if err != nil {
		return 0, err
	}
	if v < 2 {
		return v, nil
	}
	// Where the header ends: what br took from rd, less what it holds.
	off := len(buf) - rd.Len() - br.Buffered()
	var records uint64
	var last []byte
	for off < len(buf) {
		size, n := binary.Uvarint(buf[off:])
		if n <= 0 {
			return 0, fmt.Errorf("%w: record %d: length prefix cut off", ErrSnapshotCorrupt, records+1)
		}
		if size > maxSnapshotRecord || uint64(len(buf)-off-n) < size {
			return 0, fmt.Errorf("%w: record %d: record of %d bytes cut off or over the limit", ErrSnapshotCorrupt, records+1, size)
		}
		last = buf[off+n : off+n+int(size)]
		off += n + int(size)
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
