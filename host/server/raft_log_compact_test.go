package server

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// gatedLogStore is an in-memory log whose DeleteRange waits for gate to
// close: a disk taking its time over a compaction.
type gatedLogStore struct {
	*raft.InmemStore
	gate    chan struct{}
	mu      sync.Mutex
	deletes [][2]uint64
	closed  bool
	// failNext makes the next DeleteRange fail; entered counts the
	// DeleteRange calls begun.
	failNext bool
	entered  int
}

func newGatedLogStore(t *testing.T, entries uint64) *gatedLogStore {
	g := &gatedLogStore{InmemStore: raft.NewInmemStore(), gate: make(chan struct{})}
	storeEntries(t, g.InmemStore, 1, entries, 1)
	return g
}

func (g *gatedLogStore) DeleteRange(lo, hi uint64) error {
	g.mu.Lock()
	g.entered++
	gate := g.gate
	g.mu.Unlock()
	<-gate
	g.mu.Lock()
	if g.failNext {
		g.failNext = false
		g.mu.Unlock()
		return errors.New("disk full")
	}
	g.deletes = append(g.deletes, [2]uint64{lo, hi})
	g.mu.Unlock()
	return g.InmemStore.DeleteRange(lo, hi)
}

// FirstIndex is the oldest entry held, as bolt's is (raft's InmemStore
// moves its own past the deleted range even where the log has a gap).
func (g *gatedLogStore) FirstIndex() (uint64, error) {
	first, _ := g.InmemStore.FirstIndex()
	last, _ := g.InmemStore.LastIndex()
	var l raft.Log
	for i := first; i != 0 && i <= last; i++ {
		if g.InmemStore.GetLog(i, &l) == nil {
			return i, nil
		}
	}
	return 0, nil
}

func (g *gatedLogStore) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	return nil
}

func storeEntries(t *testing.T, s raft.LogStore, from, to, term uint64) {
	t.Helper()
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry %d term %d", i, term))})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
}

// returns runs f and fails the test if it has not returned within d.
func returns(t *testing.T, what string, d time.Duration, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s has not returned after %s", what, d)
	}
}

func indexes(t *testing.T, s raft.LogStore) (uint64, uint64) {
	t.Helper()
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return first, last
}

// raft's compaction of the oldest entries (a follower's, inside
// InstallSnapshot) returns without waiting for the disk: the entries are
// gone for raft at once and from the disk in the background.
func TestLogCompactionDoesNotWaitForTheDisk(t *testing.T) {
	inner := newGatedLogStore(t, 3000)
	c := newCompactingLogStore(inner, hclog.NewNullLogger())
	returns(t, "DeleteRange(1, 2000) with the disk's deletion blocked", 10*time.Second, func() error { return c.DeleteRange(1, 2000) })
	if first, last := indexes(t, c); first != 2001 || last != 3000 {
		t.Fatalf("after the compaction raft sees entries %d..%d, want 2001..3000", first, last)
	}
	var l raft.Log
	if err := c.GetLog(1500, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of a compacted entry: %v, want ErrLogNotFound", err)
	}
	if err := c.GetLog(2001, &l); err != nil || l.Index != 2001 {
		t.Fatalf("GetLog(2001) = %d, %v", l.Index, err)
	}
	// raft goes on appending while the disk deletes.
	returns(t, "StoreLogs during the deletion", 10*time.Second, func() error {
		return c.StoreLogs([]*raft.Log{{Index: 3001, Term: 1, Type: raft.LogCommand}})
	})
	close(inner.gate)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if first, _ := indexes(t, inner.InmemStore); first != 2001 {
			return fmt.Errorf("the disk's first entry is %d, want 2001", first)
		}
		return nil
	})
	inner.mu.Lock()
	defer inner.mu.Unlock()
	for _, d := range inner.deletes {
		if d[1]-d[0]+1 > compactChunk {
			t.Fatalf("a deletion of %d..%d: more than %d entries in one write", d[0], d[1], compactChunk)
		}
	}
}

// A follower cutting conflicting entries from the end of its log has them
// gone before it stores the leader's.
func TestLogTruncationOfTheEndIsDoneAtOnce(t *testing.T) {
	inner := newGatedLogStore(t, 100)
	close(inner.gate)
	c := newCompactingLogStore(inner, hclog.NewNullLogger())
	if err := c.DeleteRange(91, 100); err != nil {
		t.Fatal(err)
	}
	if _, last := indexes(t, inner.InmemStore); last != 90 {
		t.Fatalf("the disk's last entry after the cut is %d, want 90", last)
	}
}

// Where raft stores again at or below what it compacted (every entry
// deleted, then the log started anew), the disk holds no old entry beside
// the new ones.
func TestStoreBelowTheCompactedFloorFinishesTheDeletion(t *testing.T) {
	inner := newGatedLogStore(t, 100)
	c := newCompactingLogStore(inner, hclog.NewNullLogger())
	if err := c.DeleteRange(1, 90); err != nil {
		t.Fatal(err)
	}
	// The rest cut from the end of the log, as the store's own
	// synchronous path would once the disk lets it.
	if err := inner.InmemStore.DeleteRange(91, 100); err != nil {
		t.Fatal(err)
	}
	if first, last := indexes(t, c); first != 0 || last != 0 {
		t.Fatalf("every entry deleted, raft sees %d..%d, want 0..0 (empty)", first, last)
	}
	close(inner.gate)
	storeEntries(t, c, 50, 60, 2)
	if first, last := indexes(t, inner.InmemStore); first != 50 || last != 60 {
		t.Fatalf("the disk holds %d..%d, want only the new 50..60", first, last)
	}
	var l raft.Log
	if err := c.GetLog(50, &l); err != nil || l.Term != 2 {
		t.Fatalf("GetLog(50): term %d, %v; want the new entry of term 2", l.Term, err)
	}
}

// A cut that reaches the newest entry (a follower truncating conflicting
// entries from its oldest on) is done before DeleteRange returns, even
// though it starts at the oldest entry: a crash must not bring back the
// uncommitted entries it cut.
func TestLogTruncationOfTheWholeLogIsDoneAtOnce(t *testing.T) {
	inner := newGatedLogStore(t, 100)
	close(inner.gate)
	c := newCompactingLogStore(inner, hclog.NewNullLogger())
	if err := c.DeleteRange(1, 100); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	floor := c.floor
	c.mu.Unlock()
	if floor != 0 {
		t.Fatalf("the cut of the whole log was left to the background (floor %d)", floor)
	}
	if first, last := indexes(t, inner.InmemStore); first != 0 || last != 0 {
		t.Fatalf("the disk holds %d..%d after the cut, want nothing", first, last)
	}
}

// Where the background deletion failed and raft then stores below the
// floor, the deletion finishes first, and raft's reads meanwhile do not
// wait for it.
func TestStoreAfterAFailedDeletionDoesNotBlockReads(t *testing.T) {
	inner := newGatedLogStore(t, 100)
	inner.failNext = true
	close(inner.gate)
	c := newCompactingLogStore(inner, hclog.NewNullLogger())
	if err := c.DeleteRange(1, 90); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	idle := c.idle
	c.mu.Unlock()
	<-idle
	if first, _ := indexes(t, inner); first != 1 {
		t.Fatalf("the failed deletion left the disk from %d, want 1", first)
	}
	inner.mu.Lock()
	inner.gate = make(chan struct{})
	entered := inner.entered
	inner.mu.Unlock()
	stored := make(chan error, 1)
	go func() {
		stored <- c.StoreLogs([]*raft.Log{{Index: 50, Term: 2, Type: raft.LogCommand}})
	}()
	testutil.WaitFor(t, 10*time.Second, func() error {
		inner.mu.Lock()
		defer inner.mu.Unlock()
		if inner.entered == entered {
			return errors.New("the store has not begun the deletion again")
		}
		return nil
	})
	returns(t, "GetLog while the deletion the store waits for is blocked", 10*time.Second, func() error {
		var l raft.Log
		return c.GetLog(95, &l)
	})
	inner.mu.Lock()
	close(inner.gate)
	inner.mu.Unlock()
	if err := <-stored; err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := inner.InmemStore.GetLog(10, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("the disk still holds compacted entry 10 after the store (%v)", err)
	}
	if err := c.GetLog(50, &l); err != nil || l.Term != 2 {
		t.Fatalf("GetLog(50): term %d, %v; want the new entry of term 2", l.Term, err)
	}
}

// logWithGap is a follower's log after it installed a snapshot far ahead
// of it: its old entries 1..1000, then the leader's from 100,001.
func logWithGap(t *testing.T, to uint64) *gatedLogStore {
	inner := newGatedLogStore(t, 1000)
	storeEntries(t, inner.InmemStore, 100_001, to, 2)
	return inner
}

// The background deletion skips a gap in the log rather than writing (and
// fsyncing) an empty chunk per compactChunk indexes of it.
func TestLogCompactionSkipsGapsInTheLog(t *testing.T) {
	inner := logWithGap(t, 120_000)
	c := newCompactingLogStore(inner, hclog.NewNullLogger())
	if err := c.DeleteRange(1, 110_000); err != nil {
		t.Fatal(err)
	}
	close(inner.gate)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if first, _ := indexes(t, inner); first != 110_001 {
			return fmt.Errorf("the disk's first entry is %d, want 110001", first)
		}
		return nil
	})
	c.mu.Lock()
	idle := c.idle
	c.mu.Unlock()
	<-idle
	inner.mu.Lock()
	defer inner.mu.Unlock()
	// 11,000 entries: 2 chunks below the gap, 20 above it.
	if want := (1000+compactChunk-1)/compactChunk + (10_000+compactChunk-1)/compactChunk; len(inner.deletes) > want {
		t.Fatalf("%d deletions for 11,000 entries, want at most %d: %v", len(inner.deletes), want, inner.deletes)
	}
}

// While a deletion is pending, FirstIndex names an entry that exists, also
// when the deleted range ends inside a gap of the log.
func TestLogFirstIndexExistsAcrossAGap(t *testing.T) {
	inner := logWithGap(t, 100_010)
	c := newCompactingLogStore(inner, hclog.NewNullLogger())
	defer close(inner.gate)
	if err := c.DeleteRange(1, 50_000); err != nil {
		t.Fatal(err)
	}
	first, last := indexes(t, c)
	if first != 100_001 || last != 100_010 {
		t.Fatalf("raft sees %d..%d, want 100001..100010", first, last)
	}
	var l raft.Log
	if err := c.GetLog(first, &l); err != nil {
		t.Fatalf("FirstIndex() = %d but GetLog: %v", first, err)
	}
	// The log emptied by the deletion, then stored anew past the gap.
	inner2 := newGatedLogStore(t, 1000)
	c2 := newCompactingLogStore(inner2, hclog.NewNullLogger())
	defer close(inner2.gate)
	if err := c2.DeleteRange(1, 995); err != nil {
		t.Fatal(err)
	}
	if err := inner2.InmemStore.DeleteRange(996, 1000); err != nil { // the end cut
		t.Fatal(err)
	}
	storeEntries(t, c2, 100_001, 100_010, 2)
	if first, _ := indexes(t, c2); first != 100_001 {
		t.Fatalf("after a store past the gap FirstIndex() = %d, want 100001", first)
	}
}

// Closing waits for the deletion in progress, leaves the rest, and closes
// the disk log.
func TestCompactingLogStoreCloseStopsTheDeletion(t *testing.T) {
	inner := newGatedLogStore(t, 5000)
	c := newCompactingLogStore(inner, hclog.NewNullLogger())
	if err := c.DeleteRange(1, 4000); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	close(inner.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if !inner.closed {
		t.Fatal("Close left the disk log open")
	}
	if err := c.DeleteRange(4001, 4500); err == nil {
		t.Fatal("DeleteRange after Close succeeded")
	}
}

// Entries a stop left on the disk come back at the next start as entries
// a snapshot covers, and the next compaction deletes them.
func TestCompactedEntriesLeftOnDiskAreDeletedByTheNextCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	storeEntries(t, bolt, 1, 3000, 1)
	gated := &gatedBolt{BoltStore: bolt, gate: make(chan struct{})}
	c := newCompactingLogStore(gated, hclog.NewNullLogger())
	if err := c.DeleteRange(1, 2500); err != nil {
		t.Fatal(err)
	}
	// The stop comes before the disk deleted anything.
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	testutil.WaitFor(t, 10*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.closed {
			return errors.New("not closing yet")
		}
		return nil
	})
	close(gated.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}

	bolt, err = raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	c = newCompactingLogStore(bolt, hclog.NewNullLogger())
	defer c.Close()
	first, last := indexes(t, c)
	if last != 3000 || first < 1 || first > 2501 {
		t.Fatalf("after the restart the log is %d..%d, want ..3000 from at most 2501", first, last)
	}
	if err := c.DeleteRange(first, 2900); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if first, _ := indexes(t, bolt); first != 2901 {
			return fmt.Errorf("the disk's first entry is %d, want 2901", first)
		}
		return nil
	})
	var l raft.Log
	if err := c.GetLog(3000, &l); err != nil || string(l.Data) != "entry 3000 term 1" {
		t.Fatalf("GetLog(3000) = %q, %v", l.Data, err)
	}
}

// gatedBolt is bolt whose DeleteRange waits for gate.
type gatedBolt struct {
	*raftboltdb.BoltStore
	gate chan struct{}
}

func (g *gatedBolt) DeleteRange(lo, hi uint64) error {
	<-g.gate
	return g.BoltStore.DeleteRange(lo, hi)
}

// BenchmarkLogCompaction times the DeleteRange a follower makes inside
// InstallSnapshot, of 15,000 of a bolt log's 20,000 entries of 600 bytes
// (a registration's size): bolt's own, then through compactingLogStore,
// whose background deletion is waited for outside the timer.
func BenchmarkLogCompaction(b *testing.B) {
	const entries, deleted = 20_000, 15_000
	for _, lazy := range []bool{false, true} {
		name := map[bool]string{false: "bolt", true: "compacting"}[lazy]
		b.Run(name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(b.TempDir(), "raft.db")})
				if err != nil {
					b.Fatal(err)
				}
				data := make([]byte, 600)
				for from := uint64(1); from <= entries; from += 1000 {
					var logs []*raft.Log
					for i := from; i < from+1000; i++ {
						logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data})
					}
					if err := bolt.StoreLogs(logs); err != nil {
						b.Fatal(err)
					}
				}
				var store closingLogStore = bolt
				var c *compactingLogStore
				if lazy {
					c = newCompactingLogStore(bolt, hclog.NewNullLogger())
					store = c
				}
				b.StartTimer()
				if err := store.DeleteRange(1, deleted); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if c != nil {
					c.mu.Lock()
					idle := c.idle
					c.mu.Unlock()
					<-idle
					if first, _ := bolt.FirstIndex(); first != deleted+1 {
						b.Fatalf("the disk's first entry is %d", first)
					}
				}
				_ = store.Close()
				b.StartTimer()
			}
		})
	}
}

// Through raft with the log on disk: servers compact behind snapshots, a
// lagging follower installs one (compacting its own log inside the
// install), and after a restart of every server in turn the log and the
// state go on from where they were.
func TestLogOnDiskCompactsThroughInstallAndRestart(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *testConfig) {
		c.DataDir = t.TempDir()
		c.RaftSnapshotThreshold = 16
		c.RaftTrailingLogs = 8
	})
	leader := tc.waitLeader()
	lagging := tc.followers(leader)[0]
	for i := range 40 {
		registerThroughLeaderChanges(t, tc, testNode(fmt.Sprintf("before-%03d", i)))
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if lagging.raft.AppliedIndex() < leader.raft.AppliedIndex() {
			return errors.New("the follower has not applied everything yet")
		}
		return nil
	})
	tc.partition(lagging)
	var ids []string
	for i := range 100 {
		n := testNode(fmt.Sprintf("n%03d", i))
		ids = append(ids, n.GetId())
		registerThroughLeaderChanges(t, tc, n, lagging)
	}
	for _, s := range tc.followers(lagging) {
		testutil.WaitFor(t, 10*time.Second, func() error {
			if s.raft.AppliedIndex() < leader.raft.AppliedIndex() {
				return fmt.Errorf("%s has not applied everything yet", s.cfg.Name)
			}
			return nil
		})
		if err := s.raft.Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
		if first, err := s.raftFirstIndex(); err != nil || first <= lagging.raft.LastIndex() {
			t.Fatalf("%s's log starts at %d (%v), the follower is at %d: no snapshot would be needed", s.cfg.Name, first, err, lagging.raft.LastIndex())
		}
	}
	tc.heal(lagging)
	for _, id := range ids {
		waitNode(t, lagging, id, pb.NodeStatus_NODE_STATUS_READY)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if got := lagging.raft.Stats()["last_snapshot_index"]; got == "0" {
			return errors.New("the follower caught up without installing a snapshot")
		}
		return nil
	})
	for _, s := range slices.Clone(tc.servers) {
		tc.restart(s, nil)
		tc.waitLeader()
	}
	tc.waitLeader()
	after := testNode("after-restarts")
	registerThroughLeaderChanges(t, tc, after)
	for _, s := range tc.servers {
		waitNode(t, s, after.GetId(), pb.NodeStatus_NODE_STATUS_READY)
		for _, id := range ids {
			if n, _ := s.State().NodeByID(nil, id); n == nil {
				t.Fatalf("%s lost node %s across the restarts", s.cfg.Name, id)
			}
		}
	}
}
