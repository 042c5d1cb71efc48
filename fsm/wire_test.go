package fsm

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// wireMessages are the messages the FSM reads at the wire level: command
// bodies and rows.
var wireMessages = []proto.Message{
	&pb.NodeRegisterCommand{}, &pb.Node{}, &pb.ServerMember{}, &pb.SnapshotRecord{},
}

// wireSchemas holds wireMessages compiled, by full name.
var wireSchemas = func() map[protoreflect.FullName]*wireSchema {
	out := map[protoreflect.FullName]*wireSchema{}
	for _, m := range wireMessages {
		md := m.ProtoReflect().Descriptor()
		out[md.FullName()] = compileWire(md)
	}
	return out
}()

// wireSeeds returns encodings worth starting from: real rows and commands,
// and each cut short or with a byte flipped.
func wireSeeds(t testing.TB) [][]byte {
	heavy := testutil.HeavyNode("n1")
	heavy.CreateIndex, heavy.ModifyIndex = 7, 9
	var seeds [][]byte
	for _, m := range []proto.Message{
		&pb.NodeRegisterCommand{Node: heavy},
		heavy,
		&pb.ServerMember{Id: "s1", Name: "one", RpcAddr: "127.0.0.1:1", CreateIndex: 3},
		&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Node{Node: heavy}},
	} {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b, b[:len(b)/2], b[:len(b)-1])
		flipped := bytes.Clone(b)
		flipped[len(b)/3] ^= 0x80
		seeds = append(seeds, flipped)
	}
	// A string that is not UTF-8, a field number 0, a stray end-group, an
	// unknown group, the node field twice, a packed field where none is
	// repeated, a varint of 11 bytes, a field number over the maximum
	// (which protowire.ConsumeTag takes and proto.Unmarshal refuses).
	seeds = append(seeds,
		[]byte{0x0a, 0x03, 0x0a, 0x01, 0xff},
		[]byte{0x00, 0x01},
		[]byte{0x0c},
		[]byte{0xab, 0x01, 0x08, 0x01, 0xac, 0x01},
		[]byte{0x0a, 0x03, 0x0a, 0x01, 'a', 0x0a, 0x02, 0x18, 0x01},
		[]byte{0x0a, 0x03, 0x1a, 0x01, 0x01},
		[]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		[]byte{0x12, 0x01, 'x', 0xa8, 0xb1, 0xe3, 0x9f, 0x30},
	)
	return seeds
}

// FuzzCheckWire holds checkWire to proto.Unmarshal: for any bytes and each
// message the FSM reads at the wire level, checkWire accepts exactly what
// proto.Unmarshal accepts, and the field readers return what the decoded
// message holds.
func FuzzCheckWire(f *testing.F) {
	for _, s := range wireSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range wireMessages {
			checkWireAgrees(t, m, b)
		}
	})
}

func TestCheckWireSeeds(t *testing.T) {
	for _, s := range wireSeeds(t) {
		for _, m := range wireMessages {
			checkWireAgrees(t, m, s)
		}
	}
}

func checkWireAgrees(t *testing.T, m proto.Message, b []byte) {
	t.Helper()
	md := m.ProtoReflect().Descriptor()
	decoded := m.ProtoReflect().New().Interface()
	uerr := proto.Unmarshal(b, decoded)
	werr := checkWire(wireSchemas[md.FullName()], b)
	if (uerr == nil) != (werr == nil) {
		t.Fatalf("%s % x: proto.Unmarshal: %v; checkWire: %v", md.Name(), b, uerr, werr)
	}
	if uerr != nil {
		return
	}
	switch d := decoded.(type) {
	case *pb.NodeRegisterCommand:
		raw, ok := wireMessage(b, nodeRegisterNodeField)
		if ok != (d.Node != nil) {
			t.Fatalf("% x: wireMessage found node %t, decoded node %v", b, ok, d.Node)
		}
		if ok {
			n := &pb.Node{}
			if err := proto.Unmarshal(raw, n); err != nil || !proto.Equal(n, d.Node) {
				t.Fatalf("% x: node from wireMessage %v (%v), decoded %v", b, n, err, d.Node)
			}
		}
	case *pb.Node:
		if got := wireString(b, nodeFieldID); got != d.GetId() {
			t.Fatalf("% x: wireString id %q, decoded %q", b, got, d.GetId())
		}
		if got := pb.NodeStatus(wireVarint(b, nodeFieldStatus)); got != d.GetStatus() {
			t.Fatalf("% x: wireVarint status %v, decoded %v", b, got, d.GetStatus())
		}
		if got := wireVarint(b, nodeFieldCreateIndex); got != d.GetCreateIndex() {
			t.Fatalf("% x: wireVarint create_index %d, decoded %d", b, got, d.GetCreateIndex())
		}
		// What the FSM appends overrides what was there.
		appended := appendVarintField(bytes.Clone(b), nodeFieldModifyIndex, 12345)
		n := &pb.Node{}
		if err := proto.Unmarshal(appended, n); err != nil || n.GetModifyIndex() != 12345 {
			t.Fatalf("% x: after appending modify_index: %v (%v)", b, n, err)
		}
		n.ModifyIndex = d.GetModifyIndex()
		if !proto.Equal(n, d) {
			t.Fatalf("% x: appending modify_index changed other fields: %v, was %v", b, n, d)
		}
	}
}

func TestFieldNumberPanicsForMissingField(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("fieldNumber of a missing field did not panic")
		}
	}()
	fieldNumber((&pb.Node{}).ProtoReflect().Descriptor(), "no_such_field")
}

// BenchmarkCheckWire checks a NodeRegister body of the heavy node.
func BenchmarkCheckWire(b *testing.B) {
	body, err := encodeOptions.Marshal(&pb.NodeRegisterCommand{Node: testutil.HeavyNode("00000000-0000-4000-8000-000000000001")})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := checkWire(nodeRegisterWire, body); err != nil {
			b.Fatal(err)
		}
	}
}
