package fsm_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// FuzzNodeRegisterMatchesDecode holds NodeRegister, which the FSM applies
// to the node's encoding without decoding it, to the obvious version that
// decodes the command and sets the fields on the message: two command
// bodies applied one after the other must leave the nodes a decoding FSM
// would (unknown fields included), refuse what it would refuse, count
// statuses as it would, and survive a snapshot.
func FuzzNodeRegisterMatchesDecode(f *testing.F) {
	node := func(fields ...[]byte) []byte { return slices.Concat(fields...) }
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	body := func(nodes ...[]byte) []byte {
		var b []byte
		for _, n := range nodes {
			b = protowire.AppendBytes(protowire.AppendTag(b, 1, protowire.BytesType), n)
		}
		return b
	}
	const id, name, status, registered, create, modify = 1, 2, 3, 9, 14, 15
	ready := varint(status, uint64(pb.NodeStatus_NODE_STATUS_READY))
	for _, seed := range [][2][]byte{
		// Registered, then registered again with a new registration time
		// and indexes of its own, which the FSM's replace.
		{body(node(str(id, "n1"), ready, varint(registered, 5))),
			body(node(str(id, "n1"), ready, varint(registered, 9), varint(create, 77), varint(modify, 77)))},
		// A registration time before 1970, kept on re-registration.
		{body(node(str(id, "n1"), ready, varint(registered, uint64(1<<64-5)))), body(node(str(id, "n1"), ready))},
		// The node field three times: the occurrences merge, the ID from
		// the first, the name from the last.
		{body(node(str(id, "n1"), str(name, "a")), node(varint(registered, 4)), node(str(name, "b"), ready)), body(node(str(id, "n2"), ready))},
		// Twice and empty both times: a node, without an ID.
		{body(nil, nil), body()},
		// Statuses past 32 bits: int32(1<<32) is unspecified, refused;
		// int32(1<<32+1) is ready.
		{body(node(str(id, "n1"), varint(status, 1<<32))), body(node(str(id, "n1"), varint(status, 1<<32+1)))},
		// Unknown fields, and create_index as a fixed64 (so an unknown
		// field too), stay with the node.
		{body(node(str(id, "n1"), ready, varint(100, 7), protowire.AppendFixed64(protowire.AppendTag(nil, create, protowire.Fixed64Type), 3))),
			body(node(str(id, "n1"), ready, str(200, "x")))},
		// Malformed: the node's name is not UTF-8.
		{body(node(str(id, "n1"), ready, str(name, "\xff"))), body(node(str(id, "n1"), ready))},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		got := fsm.New(nil)
		want := map[string]*pb.Node{}
		for i, b := range [][]byte{first, second} {
			index := uint64(i + 1)
			res := applyAt(got, index, append([]byte{byte(fsm.NodeRegister)}, b...))
			if err := registerByDecoding(want, index, b); err != nil {
				if res.Err == nil || !sameRefusal(res.Err, err) {
					t.Fatalf("body %d (% x): FSM says %v, decoding says %v", i, b, res.Err, err)
				}
				continue
			}
			if res.Err != nil {
				t.Fatalf("body %d (% x): FSM refused (%v) what decoding applies", i, b, res.Err)
			}
		}
		compareNodes(t, "applied", got.State(), want)
		restored := fsm.New(nil)
		if err := restoreBytes(restored, snapshotBytes(t, got)); err != nil {
			t.Fatalf("restoring a snapshot: %v", err)
		}
		compareNodes(t, "restored", restored.State(), want)
	})
}

// registerByDecoding applies a NodeRegister body to nodes the plain way.
func registerByDecoding(nodes map[string]*pb.Node, index uint64, body []byte) error {
	cmd := &pb.NodeRegisterCommand{}
	if err := proto.Unmarshal(body, cmd); err != nil {
		return fsm.ErrMalformedCommand
	}
	n := cmd.GetNode()
	switch {
	case n == nil:
		return errors.New("no node")
	case n.GetId() == "":
		return errors.New("node has no ID")
	case n.GetStatus() == pb.NodeStatus_NODE_STATUS_UNSPECIFIED:
		return errors.New("status NODE_STATUS_UNSPECIFIED")
	}
	n.CreateIndex = index
	if old, ok := nodes[n.GetId()]; ok {
		n.CreateIndex, n.RegisteredAt = old.GetCreateIndex(), old.GetRegisteredAt()
	}
	n.ModifyIndex = index
	nodes[n.GetId()] = n
	return nil
}

// sameRefusal reports whether the FSM's error is the refusal the decoding
// reference gave: a malformed body, or an invalid command for the same
// reason.
func sameRefusal(got, want error) bool {
	if errors.Is(want, fsm.ErrMalformedCommand) {
		return errors.Is(got, fsm.ErrMalformedCommand)
	}
	return errors.Is(got, fsm.ErrInvalidCommand) && strings.Contains(got.Error(), want.Error())
}

// compareNodes checks that st holds exactly want, and counts its statuses
// as want's nodes have them.
func compareNodes(t *testing.T, what string, st *fsm.StateStore, want map[string]*pb.Node) {
	t.Helper()
	nodes, err := st.Nodes(nil)
	if err != nil {
		t.Fatalf("%s: listing nodes: %v", what, err)
	}
	if len(nodes) != len(want) {
		t.Fatalf("%s: %d nodes, want %d", what, len(nodes), len(want))
	}
	wantCounts := map[pb.NodeStatus]int{}
	for _, n := range nodes {
		if w := want[n.GetId()]; !proto.Equal(n, w) {
			t.Fatalf("%s: node %q is\n%v\nwant\n%v", what, n.GetId(), n, w)
		}
		wantCounts[n.GetStatus()]++
	}
	counts, err := st.NodeCountsByStatus()
	if err != nil {
		t.Fatalf("%s: counting nodes: %v", what, err)
	}
	for s, c := range counts {
		if c != wantCounts[s] {
			t.Errorf("%s: NodeCountsByStatus[%s] = %d, want %d", what, s, c, wantCounts[s])
		}
	}
	for s, c := range wantCounts {
		if counts[s] != c {
			t.Errorf("%s: NodeCountsByStatus[%s] = %d, want %d", what, s, counts[s], c)
		}
	}
}
