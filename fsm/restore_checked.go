package fsm

import (
	"bytes"
	"crypto/sha256"
	"hash"
	"io"
	"sync/atomic"
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
	size  int64
	sum   [sha256.Size]byte
}

// Size is the length of the stream, in bytes.
func (c *CheckedSnapshot) Size() int64 { return c.size }

// CheckSnapshot reads the snapshot stream r into a new store as
// RestoreStrict does, refusing what it refuses, and changes nothing: the
// current state stays in use.
func (f *FSM) CheckSnapshot(r io.Reader) (*CheckedSnapshot, error) {
	h := sha256.New()
	cr := &countingReader{r: io.TeeReader(r, h)}
	store, err := f.readSnapshot(cr, true)
	if err != nil {
		return nil, err
	}
	// readSnapshot reads to the end of the stream; drain anything left
	// anyway, so the sum covers every byte raft will be given.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return nil, err
	}
	c := &CheckedSnapshot{store: store, size: cr.n}
	h.Sum(c.sum[:0])
	return c, nil
}

// OfferRestore offers c's store to f's next Restore: if that Restore's
// stream is byte for byte the one c was read from (its length and SHA-256),
// the store is swapped in without reading the stream again; any other
// stream is read as always. An offer is taken by one Restore, whichever
// stream it reads. withdraw takes the offer back if no Restore took it.
func (f *FSM) OfferRestore(c *CheckedSnapshot) (withdraw func()) {
	f.offered.Store(c)
	return func() { f.offered.CompareAndSwap(c, nil) }
}

// offeredStore returns the offered store if rc's stream is the one it was
// read from, and otherwise a reader that yields rc's whole stream again.
func (f *FSM) offeredStore(rc io.Reader) (*StateStore, io.Reader, error) {
	c := f.offered.Swap(nil)
	if c == nil {
		return nil, rc, nil
	}
	var buf bytes.Buffer
	h := sha256.New()
	// One byte more than the checked stream tells a longer stream apart.
	n, err := io.Copy(io.MultiWriter(&buf, h), io.LimitReader(rc, c.size+1))
	if err != nil {
		return nil, nil, err
	}
	if n == c.size && sameSum(h, c.sum) {
		return c.store, nil, nil
	}
	f.logger.Warn("restore stream is not the checked snapshot offered: reading it", "bytes", n, "checked_bytes", c.size)
	return nil, io.MultiReader(&buf, rc), nil
}

func sameSum(h hash.Hash, sum [sha256.Size]byte) bool {
	var got [sha256.Size]byte
	h.Sum(got[:0])
	return got == sum
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// offeredSnapshot is where an FSM keeps the CheckedSnapshot offered to its
// next Restore.
type offeredSnapshot = atomic.Pointer[CheckedSnapshot]
