package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"
)

// CheckedSnapshot is a snapshot stream read, and checked as RestoreStrict
// checks it, into a store of its FSM's tables that nothing uses yet. An
// operator's upload is read this way before raft is given it (raft takes a
// server down when its FSM refuses a snapshot); offered back to the FSM
// (OfferRestore), the store is what raft's Restore of the same bytes swaps
// in, so the leader decodes an upload once, not twice. Decoding a state of
// 10,000 nodes takes seconds on a loaded machine, and raft's leader loop
// waits for its FSM's restore.
type CheckedSnapshot struct {
	store *StateStore
	// src holds the checked bytes, size of them: a Restore's stream is
	// compared with them as it is read, and, where it differs, read again
	// from them rather than from memory.
	src  io.ReaderAt
	size int64
	sum  [sha256.Size]byte
}

// Size is the length of the stream, in bytes.
func (c *CheckedSnapshot) Size() int64 { return c.size }

// CheckSnapshot reads the snapshot stream held in src's first size bytes
// into a new store as RestoreStrict does, refusing what it refuses, and
// changes nothing: the current state stays in use. src must hold the same
// bytes, and stay readable, until an offer of the result is withdrawn
// (OfferRestore): a Restore given the offer compares its stream with them.
func (f *FSM) CheckSnapshot(src io.ReaderAt, size int64) (*CheckedSnapshot, error) {
	h := sha256.New()
	r := io.TeeReader(io.NewSectionReader(src, 0, size), h)
	store, err := f.readSnapshot(r, true)
	if err != nil {
		return nil, err
	}
	// readSnapshot reads to the end of the stream; drain anything left
	// anyway, so the sum covers every byte raft will be given.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, err
	}
	c := &CheckedSnapshot{store: store, src: src, size: size}
	h.Sum(c.sum[:0])
	return c, nil
}

// offerSlot holds the CheckedSnapshot offered to an FSM's next Restore. mu
// is held by the Restore that took the offer for as long as it reads the
// offer's src, so that withdrawing the offer (after which src may be
// closed) waits for it.
type offerSlot struct {
	mu sync.Mutex
	c  *CheckedSnapshot
}

// OfferRestore offers c's store to f's next Restore: if that Restore's
// stream is byte for byte the one c was read from (compared as it is read,
// and its length and SHA-256), the store is swapped in without decoding
// the stream again; any other stream is decoded as always, with no more of
// it held in memory than without an offer. An offer is taken by one
// Restore, whichever stream it reads. withdraw takes the offer back if no
// Restore took it, and returns once no Restore reads c's src any more.
func (f *FSM) OfferRestore(c *CheckedSnapshot) (withdraw func()) {
	f.offered.mu.Lock()
	f.offered.c = c
	f.offered.mu.Unlock()
	return func() {
		f.offered.mu.Lock()
		if f.offered.c == c {
			f.offered.c = nil
		}
		f.offered.mu.Unlock()
	}
}

// compareChunk is how much of a Restore's stream is compared with the
// offered snapshot at a time: the memory an offer costs a Restore.
const compareChunk = 256 << 10

// offeredStore returns the offered store if rc's stream is the one it was
// read from, and otherwise a reader that yields rc's whole stream again:
// the part already compared read back from the offer's src, then the rest
// of rc. done must be called once that reader is no longer read.
func (f *FSM) offeredStore(rc io.Reader) (store *StateStore, r io.Reader, done func(), err error) {
	f.offered.mu.Lock()
	c := f.offered.c
	f.offered.c = nil
	if c == nil {
		f.offered.mu.Unlock()
		return nil, rc, func() {}, nil
	}
	done = f.offered.mu.Unlock
	store, r, err = c.match(rc)
	if err != nil || store != nil {
		done()
		return store, r, func() {}, err
	}
	f.logger.Warn("restore stream is not the checked snapshot offered: decoding it")
	return nil, r, done, nil
}

// match compares rc's stream with c's bytes as it reads it, a chunk at a
// time. It returns c's store if they are the same stream — c's bytes, with
// c's SHA-256, then the end of rc — and otherwise a reader yielding every
// byte of rc's stream: the bytes that matched read back from c.src, the
// chunk that did not, then the rest of rc.
func (c *CheckedSnapshot) match(rc io.Reader) (*StateStore, io.Reader, error) {
	got := make([]byte, compareChunk)
	want := make([]byte, compareChunk)
	h := sha256.New()
	var off int64
	for {
		// Up to one byte past the checked stream's end, which tells a
		// longer stream apart.
		n, err := io.ReadFull(rc, got[:min(int64(len(got)), c.size-off+1)])
		ended := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !ended {
			return nil, nil, err
		}
		in := min(int64(n), c.size-off)
		if m, err := c.src.ReadAt(want[:in], off); int64(m) != in {
			return nil, nil, fmt.Errorf("reading the checked snapshot back at byte %d: %w", off+int64(m), err)
		}
		if int64(n) > in || !bytes.Equal(got[:n], want[:in]) {
			return nil, c.replay(off, got[:n], rc), nil
		}
		h.Write(got[:n])
		off += int64(n)
		if !ended {
			continue
		}
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		if off == c.size && sum == c.sum {
			return c.store, nil, nil
		}
		// A shorter stream, or src no longer holding the bytes that were
		// checked: rc's bytes are src's now, either way.
		return nil, c.replay(off, nil, rc), nil
	}
}

// replay is a stream of c's first n bytes, then pending, then the rest of
// rc.
func (c *CheckedSnapshot) replay(n int64, pending []byte, rc io.Reader) io.Reader {
	return io.MultiReader(io.NewSectionReader(c.src, 0, n), bytes.NewReader(pending), rc)
}
