package main

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

func TestPayloadsAreDistinctFullRegistrations(t *testing.T) {
	p, err := newPayloads()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range 3 {
		data := p.next()
		if len(data) != p.size() {
			t.Fatalf("entry %d: %d bytes, want %d", i, len(data), p.size())
		}
		typ, msg, err := fsm.Decode(data)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if typ != fsm.NodeRegister {
			t.Fatalf("entry %d: type %s, want NodeRegister", i, typ)
		}
		n := msg.(*pb.NodeRegisterCommand).GetNode()
		id := n.GetId()
		if id == idMarker || len(id) != len(idMarker) || seen[id] {
			t.Fatalf("entry %d: node ID %q is the placeholder, the wrong length, or reused (seen %v)", i, id, seen)
		}
		seen[id] = true
		if n.GetName() != "client-"+id || n.GetFingerprint().GetHostname() != "host-"+id {
			t.Errorf("entry %d: name %q, hostname %q: the ID was not stamped everywhere", i, n.GetName(), n.GetFingerprint().GetHostname())
		}
		if len(n.GetDrivers()) != 10 || len(n.GetFingerprint().GetAttributes()) != 30 {
			t.Errorf("entry %d: %d drivers, %d attributes: not a full node", i, len(n.GetDrivers()), len(n.GetFingerprint().GetAttributes()))
		}
		want, err := encodeRegister(id)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, want) {
			t.Errorf("entry %d differs from fsm.Encode of the same node", i)
		}
	}
}

func TestPayloadsEntriesAreNotShared(t *testing.T) {
	p, err := newPayloads()
	if err != nil {
		t.Fatal(err)
	}
	a := p.next()
	before := bytes.Clone(a)
	p.next()
	if !bytes.Equal(a, before) {
		t.Fatal("minting the next entry changed an earlier one, which raft may still hold")
	}
}

func TestPayloadsEachRegisterANewNode(t *testing.T) {
	p, err := newPayloads()
	if err != nil {
		t.Fatal(err)
	}
	f := fsm.New(nil)
	const n = 5
	for i := range n {
		res := f.ApplyLog(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: p.next()})
		if res.Err != nil {
			t.Fatalf("apply %d: %v", i, res.Err)
		}
	}
	nodes, err := f.State().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != n {
		t.Fatalf("%d nodes after %d registrations, want %d", len(nodes), n, n)
	}
}
