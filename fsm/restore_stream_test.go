package fsm_test

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// paddedNodes returns the snapshot stream of an FSM holding n nodes with a
// 1 MiB meta value each, the last byte of the last one being last.
func paddedNodes(t *testing.T, n int, last byte) []byte {
	t.Helper()
	f := fsm.New(testLogger(t))
	pad := strings.Repeat("p", 1<<20)
	for i := range n {
		v := pad
		if i == n-1 {
			v = pad[:len(pad)-1] + string(last)
		}
		cmd := registerCmd("id-"+string(rune('a'+i)), "n"+string(rune('a'+i)), pb.NodeStatus_NODE_STATUS_READY)
		cmd.Node.Meta = map[string]string{"pad": v}
		applyOK(t, f, uint64(i+1), fsm.NodeRegister, cmd)
	}
	return snapshotBytes(t, f)
}

// allocated returns the bytes allocated while fn ran.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A Restore given an offer compares its stream with the offered bytes as
// it reads it: the stream is never held in memory whole (an upload may be
// gigabytes, on top of the live store and the checked one), whether it
// is the offered stream or one that differs only in its last bytes.
func TestOfferedRestoreDoesNotHoldTheStream(t *testing.T) {
	offered := paddedNodes(t, 16, 'p')
	other := paddedNodes(t, 16, 'q')
	if len(offered) != len(other) || len(offered) < 16<<20 {
		t.Fatalf("streams of %d and %d bytes: want the same length, 16 MiB or more", len(offered), len(other))
	}
	limit := uint64(len(offered) / 4)

	f := fsm.New(testLogger(t))
	c, err := f.CheckSnapshot(bytes.NewReader(offered), int64(len(offered)))
	if err != nil {
		t.Fatal(err)
	}
	f.OfferRestore(c)
	var rerr error
	if n := allocated(func() { rerr = restoreBytes(f, offered) }); n > limit {
		t.Fatalf("a Restore of the offered %d-byte stream allocated %d bytes: the stream was held in memory", len(offered), n)
	}
	if rerr != nil || f.State() != fsm.CheckedStore(c) {
		t.Fatalf("Restore of the offered stream: %v, or it did not take the checked store", rerr)
	}

	// The same stream decoded with no offer, then with an offer it turns
	// out not to be (at its last bytes): the offer may cost a chunk or
	// two, not the stream.
	plain := allocated(func() { rerr = restoreBytes(f, other) })
	if rerr != nil {
		t.Fatal(rerr)
	}
	c, err = f.CheckSnapshot(bytes.NewReader(offered), int64(len(offered)))
	if err != nil {
		t.Fatal(err)
	}
	f.OfferRestore(c)
	offeredToo := allocated(func() { rerr = restoreBytes(f, other) })
	if rerr != nil {
		t.Fatal(rerr)
	}
	if f.State() == fsm.CheckedStore(c) {
		t.Fatal("a Restore of another stream took the checked store")
	}
	if offeredToo > plain+limit {
		t.Fatalf("decoding a %d-byte stream allocated %d bytes with an offer it did not match, %d without: the stream was held in memory", len(other), offeredToo, plain)
	}
	if got := nodeNames(t, f); len(got) != 16 {
		t.Fatalf("nodes after restoring the other stream: %d, want 16", len(got))
	}
	meta := mustNode(t, f, "id-"+string(rune('a'+15))).GetMeta()["pad"]
	if meta[len(meta)-1] != 'q' {
		t.Fatal("the restore of the other stream holds the offered stream's bytes")
	}
}

// The offer's bytes changed after they were checked (the same length, so
// the stream compares equal to them): the checked store is not the
// stream's, and is not swapped in.
func TestOfferWhoseBytesChangedIsNotTaken(t *testing.T) {
	offered, other := namedNodes(t, "x1"), namedNodes(t, "x2")
	src := bytes.Clone(offered)
	f := fsm.New(testLogger(t))
	c, err := f.CheckSnapshot(bytes.NewReader(src), int64(len(src)))
	if err != nil {
		t.Fatal(err)
	}
	f.OfferRestore(c)
	copy(src, other)
	if err := restoreBytes(f, other); err != nil {
		t.Fatal(err)
	}
	if f.State() == fsm.CheckedStore(c) {
		t.Fatal("Restore took a checked store whose bytes changed since")
	}
	if got := nodeNames(t, f); len(got) != 1 || got[0] != "x2" {
		t.Fatalf("nodes: %v, want x2", got)
	}
}

// A stream that is the offered one cut short is decoded, and refused as
// any truncated snapshot is; the state in use stays.
func TestOfferedRestoreOfAShorterStream(t *testing.T) {
	offered := namedNodes(t, "x1", "x2")
	f := fsm.New(testLogger(t))
	before := f.State()
	c, err := f.CheckSnapshot(bytes.NewReader(offered), int64(len(offered)))
	if err != nil {
		t.Fatal(err)
	}
	f.OfferRestore(c)
	if err := restoreBytes(f, offered[:len(offered)-1]); err == nil {
		t.Fatal("Restore of the offered stream cut short succeeded")
	}
	if f.State() != before {
		t.Fatal("a refused Restore replaced the state")
	}
}

func mustNode(t *testing.T, f *fsm.FSM, id string) *pb.Node {
	t.Helper()
	n, err := f.State().NodeByID(nil, id)
	if err != nil || n == nil {
		t.Fatalf("node %s: %v, %v", id, n, err)
	}
	return n
}

// closableSrc is an offer's bytes that a test closes, as the server closes
// its upload once the offer is withdrawn; a read after that is recorded.
type closableSrc struct {
	b         []byte
	closed    atomic.Bool
	lateReads atomic.Int32
}

func (s *closableSrc) ReadAt(p []byte, off int64) (int, error) {
	if s.closed.Load() {
		s.lateReads.Add(1)
		return 0, errors.New("read after close")
	}
	return bytes.NewReader(s.b).ReadAt(p, off)
}

// gatedReader yields head, signals entered, waits for open, then yields
// tail.
type gatedReader struct {
	head, tail    io.Reader
	entered, open chan struct{}
	once          sync.Once
}

func (g *gatedReader) Read(p []byte) (int, error) {
	n, err := g.head.Read(p)
	if n > 0 || err == nil {
		return n, nil
	}
	g.once.Do(func() { close(g.entered) })
	<-g.open
	return g.tail.Read(p)
}

// Withdrawing an offer (after which the server closes the bytes it holds)
// waits for a Restore still comparing with them or reading them back.
func TestWithdrawWaitsForTheRestoreReadingTheOffer(t *testing.T) {
	offered, other := paddedNodes(t, 2, 'p'), paddedNodes(t, 2, 'q')
	src := &closableSrc{b: offered}
	f := fsm.New(testLogger(t))
	c, err := f.CheckSnapshot(src, int64(len(offered)))
	if err != nil {
		t.Fatal(err)
	}
	withdraw := f.OfferRestore(c)
	half := len(other) / 2
	rc := &gatedReader{head: bytes.NewReader(other[:half]), tail: bytes.NewReader(other[half:]),
		entered: make(chan struct{}), open: make(chan struct{})}
	restored := make(chan error)
	go func() { restored <- f.Restore(io.NopCloser(rc)) }()
	<-rc.entered
	if !fsm.OfferBusy(f) {
		t.Fatal("a Restore comparing its stream with the offer does not hold it")
	}
	withdrawn := make(chan struct{})
	go func() {
		withdraw()
		src.closed.Store(true)
		close(withdrawn)
	}()
	close(rc.open)
	if err := <-restored; err != nil {
		t.Fatal(err)
	}
	<-withdrawn
	if n := src.lateReads.Load(); n != 0 {
		t.Fatalf("the Restore read the offer's bytes %d times after it was withdrawn", n)
	}
	meta := mustNode(t, f, "id-b").GetMeta()["pad"]
	if meta[len(meta)-1] != 'q' {
		t.Fatal("the restore does not hold the stream's bytes")
	}
}
