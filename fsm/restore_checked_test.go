package fsm_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// namedNodes returns the snapshot stream of an FSM holding one ready node
// per name, ID "id-<name>".
func namedNodes(t *testing.T, names ...string) []byte {
	t.Helper()
	f := fsm.New(testLogger(t))
	for i, name := range names {
		applyOK(t, f, uint64(i+1), fsm.NodeRegister, registerCmd("id-"+name, name, pb.NodeStatus_NODE_STATUS_READY))
	}
	return snapshotBytes(t, f)
}

func nodeNames(t *testing.T, f *fsm.FSM) []string {
	t.Helper()
	nodes, err := f.State().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.GetName())
	}
	return names
}

func TestCheckSnapshotChangesNothing(t *testing.T) {
	f := fsm.New(testLogger(t))
	before := f.State()
	c, err := f.CheckSnapshot(sized(namedNodes(t, "x1", "x2")))
	if err != nil {
		t.Fatal(err)
	}
	if f.State() != before || len(nodeNames(t, f)) != 0 {
		t.Fatalf("CheckSnapshot changed the state in use: %v", nodeNames(t, f))
	}
	if fsm.CheckedStore(c) == before {
		t.Fatal("the checked store is the store in use")
	}
	snap := namedNodes(t, "x1")
	if _, err := f.CheckSnapshot(sized(snap[:len(snap)-1])); !errors.Is(err, fsm.ErrSnapshotCorrupt) {
		t.Fatalf("CheckSnapshot of a truncated stream: %v, want ErrSnapshotCorrupt", err)
	}
}

// An operator's upload is checked before raft's Restore; that Restore,
// given the same bytes, swaps the checked store in instead of decoding the
// state again — once.
func TestRestoreSwapsInTheOfferedCheckedStore(t *testing.T) {
	f := fsm.New(testLogger(t))
	snap := namedNodes(t, "x1", "x2")
	c, err := f.CheckSnapshot(bytes.NewReader(snap), int64(len(snap)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Size() != int64(len(snap)) {
		t.Fatalf("checked size %d, stream is %d bytes", c.Size(), len(snap))
	}
	withdraw := f.OfferRestore(c)
	if err := restoreBytes(f, snap); err != nil {
		t.Fatal(err)
	}
	withdraw()
	if f.State() != fsm.CheckedStore(c) {
		t.Fatal("Restore of the checked bytes decoded them again instead of taking the checked store")
	}
	if got := nodeNames(t, f); len(got) != 2 {
		t.Fatalf("nodes after the restore: %v, want x1 and x2", got)
	}
	// The offer is taken: the store is live now, and the same bytes
	// restored again are read into a new store.
	if err := restoreBytes(f, snap); err != nil {
		t.Fatal(err)
	}
	if f.State() == fsm.CheckedStore(c) {
		t.Fatal("a second Restore took the checked store again")
	}
	if got := nodeNames(t, f); len(got) != 2 {
		t.Fatalf("nodes after the second restore: %v", got)
	}
}

// A Restore of any other stream reads that stream, even one of the same
// length, and takes the offer away.
func TestRestoreOfAnotherStreamReadsIt(t *testing.T) {
	offered, other := namedNodes(t, "x1"), namedNodes(t, "x2")
	if len(offered) != len(other) {
		t.Fatalf("test streams differ in length (%d, %d): want the same", len(offered), len(other))
	}
	longer := namedNodes(t, "x1", "x3")
	for name, stream := range map[string][]byte{"same length": other, "longer": longer} {
		t.Run(name, func(t *testing.T) {
			f := fsm.New(testLogger(t))
			c, err := f.CheckSnapshot(bytes.NewReader(offered), int64(len(offered)))
			if err != nil {
				t.Fatal(err)
			}
			f.OfferRestore(c)
			if err := restoreBytes(f, stream); err != nil {
				t.Fatal(err)
			}
			if f.State() == fsm.CheckedStore(c) {
				t.Fatal("Restore of another stream took the checked store")
			}
			want := namedNodesOf(t, stream)
			if got := nodeNames(t, f); !slices.Equal(got, want) {
				t.Fatalf("nodes after restoring another stream: %v, want %v", got, want)
			}
			// The offer went with that Restore.
			if err := restoreBytes(f, offered); err != nil {
				t.Fatal(err)
			}
			if f.State() == fsm.CheckedStore(c) {
				t.Fatal("the offer outlived the Restore that read another stream")
			}
		})
	}
}

func TestWithdrawnOfferIsNotTaken(t *testing.T) {
	f := fsm.New(testLogger(t))
	snap := namedNodes(t, "x1")
	c, err := f.CheckSnapshot(bytes.NewReader(snap), int64(len(snap)))
	if err != nil {
		t.Fatal(err)
	}
	f.OfferRestore(c)()
	if err := restoreBytes(f, snap); err != nil {
		t.Fatal(err)
	}
	if f.State() == fsm.CheckedStore(c) {
		t.Fatal("Restore took a withdrawn offer")
	}
}

// namedNodesOf restores stream into a new FSM and returns its node names.
func namedNodesOf(t *testing.T, stream []byte) []string {
	t.Helper()
	f := fsm.New(testLogger(t))
	if err := restoreBytes(f, stream); err != nil {
		t.Fatal(err)
	}
	return nodeNames(t, f)
}

// sized is b as CheckSnapshot reads it: from a ReaderAt, so many bytes.
func sized(b []byte) (*bytes.Reader, int64) { return bytes.NewReader(b), int64(len(b)) }
