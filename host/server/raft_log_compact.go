package server

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// compactChunk is how many entries the background compaction deletes from
// the disk log in one write: each is one bolt transaction (and fsync), and
// raft's appends wait for the one in progress, so it stays short.
const compactChunk = 512

// closingLogStore is a raft.LogStore that is closed with the server.
type closingLogStore interface {
	raft.LogStore
	Close() error
}

// compactingLogStore is the raft log on disk with its compaction taken
// off raft's path. raft deletes the entries a snapshot covers with one
// DeleteRange, and a follower does it inside InstallSnapshot, before it
// answers the leader: at 5,000 nodes the bolt transaction deleting them
// took 0.5 s, once 3.2 s, and an operator's restore waits for a follower
// to have installed the snapshot (raft's Restore commits a no-op after
// it). Here a DeleteRange of the log's oldest entries returns at once:
// the entries are gone for raft from then on (FirstIndex, GetLog), and a
// goroutine deletes them from the disk compactChunk at a time.
//
// Entries not yet deleted when the server stops are found again at its
// start, as if the compaction had not run: they are entries a snapshot
// covers, which raft skips (it restores the snapshot and replays only
// what follows it) and deletes at its next compaction. A DeleteRange of
// any other range is done before it returns, as raft needs: a follower
// cutting conflicting entries from the end of its log, even where the
// cut starts at its oldest entry, so that no uncommitted entry it cut
// comes back after a crash.
type compactingLogStore struct {
	inner closingLogStore

	mu sync.Mutex
	// floor: entries at or below it are deleted as far as raft knows;
	// from, the oldest of them the disk may still hold. from > floor when
	// nothing is left to delete.
	floor, from uint64
	// running is set while the goroutine deletes; idle is closed when it
	// stops.
	running bool
	idle    chan struct{}
	// err is the background deletion's last failure.
	err    error
	closed bool
	// logger hears of a background deletion that failed: the entries stay
	// on the disk until the next DeleteRange retries them.
	logger hclog.Logger
}

func newCompactingLogStore(inner closingLogStore, logger hclog.Logger) *compactingLogStore {
	idle := make(chan struct{})
	close(idle)
	return &compactingLogStore{inner: inner, idle: idle, from: 1, logger: logger}
}

var errLogStoreClosed = errors.New("raft log store closed")

// FirstIndex is the oldest entry raft has not deleted.
func (c *compactingLogStore) FirstIndex() (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.firstLocked()
}

// firstLocked is FirstIndex with c.mu held, so that DeleteRange decides on
// the floor it then moves.
func (c *compactingLogStore) firstLocked() (uint64, error) {
	first, err := c.inner.FirstIndex()
	if err != nil || first == 0 || first > c.floor {
		return first, err
	}
	last, err := c.inner.LastIndex()
	if err != nil {
		return 0, err
	}
	if last <= c.floor {
		return 0, nil
	}
	return c.firstAboveFloorLocked(last)
}

// firstAboveFloorLocked is the oldest entry on the disk above the floor,
// given that the newest, last, is. It is floor+1 unless the log has a gap
// there: a follower that installed a snapshot far ahead of its log keeps
// its old entries below the snapshot and stores the leader's from the
// snapshot on, and the floor can fall between the two. raft appends
// without gaps after the snapshot, so the entries above the gap run to
// last and a binary search finds the oldest in a few reads.
func (c *compactingLogStore) firstAboveFloorLocked(last uint64) (uint64, error) {
	var l raft.Log
	lo, hi := c.floor+1, last // hi is on the disk; find the oldest from lo.
	for lo < hi {
		mid := lo + (hi-lo)/2
		switch err := c.inner.GetLog(mid, &l); {
		case err == nil:
			hi = mid
		case errors.Is(err, raft.ErrLogNotFound):
			lo = mid + 1
		default:
			return 0, err
		}
	}
	return hi, nil
}

// LastIndex is the newest entry, 0 when raft deleted every entry.
func (c *compactingLogStore) LastIndex() (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, err := c.inner.LastIndex()
	if err != nil {
		return 0, err
	}
	if last <= c.floor {
		return 0, nil
	}
	return last, nil
}

// GetLog reads an entry raft has not deleted.
func (c *compactingLogStore) GetLog(index uint64, log *raft.Log) error {
	c.mu.Lock()
	floor := c.floor
	c.mu.Unlock()
	if index <= floor {
		return raft.ErrLogNotFound
	}
	return c.inner.GetLog(index, log)
}

func (c *compactingLogStore) StoreLog(log *raft.Log) error {
	return c.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores entries. Entries at or below the floor (raft writing
// again where it deleted) first finish the deletion, so the disk never
// holds an old entry under a new one's index.
func (c *compactingLogStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) > 0 {
		c.mu.Lock()
		below := logs[0].Index <= c.floor
		c.mu.Unlock()
		if below {
			if err := c.settle(); err != nil {
				return err
			}
		}
	}
	return c.inner.StoreLogs(logs)
}

// DeleteRange deletes [lo, hi]. A range from the oldest entry raft has
// that leaves entries after it is deleted in the background; any other at
// once.
func (c *compactingLogStore) DeleteRange(lo, hi uint64) error {
	if lo > hi {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errLogStoreClosed
	}
	first, err := c.firstLocked()
	if err != nil {
		return err
	}
	last, err := c.inner.LastIndex()
	if err != nil {
		return err
	}
	if first != 0 && hi > c.floor && (lo > first && lo > c.floor+1 || hi >= last) {
		// Not the oldest entries, or up to the newest: the end of the
		// log, cut now (above the floor: what is below is raft's deleted
		// prefix, which the background deletion owns).
		return c.inner.DeleteRange(max(lo, c.floor+1), hi)
	}
	if hi <= c.floor {
		return nil
	}
	if c.from > c.floor {
		// Nothing pending: the disk's deletion starts here.
		c.from = lo
	}
	c.from = min(c.from, lo)
	c.floor = hi
	if !c.running {
		c.running = true
		c.idle = make(chan struct{})
		go c.compact(c.idle)
	}
	return nil
}

// compact deletes from the disk what raft deleted, a chunk at a time,
// until nothing is left or the store closes. Each chunk starts at the
// disk's oldest entry, not at from: a log with a gap (a follower's old
// entries, then the leader's from far past a snapshot it installed) would
// otherwise cost an empty write, with its fsync, per chunk of the gap.
func (c *compactingLogStore) compact(idle chan struct{}) {
	defer close(idle)
	for {
		c.mu.Lock()
		if c.closed || c.from > c.floor {
			c.running = false
			c.mu.Unlock()
			return
		}
		first, err := c.inner.FirstIndex()
		if err == nil && (first == 0 || first > c.floor) {
			// The disk holds nothing at or below the floor any more.
			c.from = c.floor + 1
			c.mu.Unlock()
			continue
		}
		from := c.from
		lo := max(from, first)
		hi := min(c.floor, lo+compactChunk-1)
		c.mu.Unlock()
		if err == nil {
			err = c.inner.DeleteRange(lo, hi)
		}
		c.mu.Lock()
		if err != nil {
			c.running = false
			c.err = err
			c.mu.Unlock()
			c.logger.Error("deleting compacted raft log entries failed; the next compaction retries", "from", lo, "to", hi, "error", err)
			return
		}
		if c.from == from {
			// Not lowered meanwhile by a DeleteRange.
			c.from = hi + 1
		}
		c.mu.Unlock()
	}
}

// settle deletes from the disk, before it returns, everything raft
// deleted, and sets the floor back to nothing. Where the background
// deletion stopped (it failed), settle runs it again and waits: a chunk at
// a time, so that raft's reads (GetLog) meanwhile do not wait for one
// long write.
func (c *compactingLogStore) settle() error {
	restarted := false
	for {
		c.mu.Lock()
		switch {
		case c.running:
		case c.from > c.floor:
			c.from, c.floor = 1, 0
			c.mu.Unlock()
			return nil
		case c.closed:
			c.mu.Unlock()
			return errLogStoreClosed
		case restarted:
			err := c.err
			c.mu.Unlock()
			return fmt.Errorf("deleting compacted raft log entries: %w", err)
		default:
			restarted = true
			c.running = true
			c.idle = make(chan struct{})
			go c.compact(c.idle)
		}
		idle := c.idle
		c.mu.Unlock()
		<-idle
	}
}

// Close stops the background deletion (what is left is deleted at the
// next compaction after a restart) and closes the disk log.
func (c *compactingLogStore) Close() error {
	c.mu.Lock()
	c.closed = true
	idle := c.idle
	c.mu.Unlock()
	<-idle
	return c.inner.Close()
}
