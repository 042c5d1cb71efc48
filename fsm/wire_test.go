package fsm

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// wireMessages are the messages the FSM reads at the wire level (command
// bodies and rows), and two that hold checkWire to proto.Unmarshal on what
// berth's messages do not have yet: structpb.Value (a type that contains
// itself, through a oneof, a map and a repeated field) and wireScalars
// (packed fields, and field numbers past the dense table).
var wireMessages = []proto.Message{
	&pb.NodeRegisterCommand{}, &pb.Node{}, &pb.ServerMember{}, &pb.SnapshotRecord{},
	&structpb.Value{}, dynamicpb.NewMessage(wireScalarsDesc),
}

// wireScalarsDesc is a proto3 message with a field of every packable kind,
// repeated, plus strings and bytes numbered either side of denseFields and
// at the largest number, and a field of its own type.
var wireScalarsDesc = func() protoreflect.MessageDescriptor {
	field := func(name string, num int32, label descriptorpb.FieldDescriptorProto_Label, typ descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Label: label.Enum(), Type: typ.Enum()}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	const rep, opt = descriptorpb.FieldDescriptorProto_LABEL_REPEATED, descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("berth/fsm/wire_test.proto"),
		Package: proto.String("berth.fsm.wiretest"),
		Syntax:  proto.String("proto3"),
		EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name:  proto.String("Color"),
			Value: []*descriptorpb.EnumValueDescriptorProto{{Name: proto.String("COLOR_UNSPECIFIED"), Number: proto.Int32(0)}},
		}},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Scalars"),
			Field: []*descriptorpb.FieldDescriptorProto{
				field("ints", 1, rep, descriptorpb.FieldDescriptorProto_TYPE_INT32, ""),
				field("fixeds", 2, rep, descriptorpb.FieldDescriptorProto_TYPE_FIXED32, ""),
				field("doubles", 3, rep, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, ""),
				field("sints", 4, rep, descriptorpb.FieldDescriptorProto_TYPE_SINT64, ""),
				field("bools", 5, rep, descriptorpb.FieldDescriptorProto_TYPE_BOOL, ""),
				field("colors", 6, rep, descriptorpb.FieldDescriptorProto_TYPE_ENUM, ".berth.fsm.wiretest.Color"),
				field("child", 7, opt, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".berth.fsm.wiretest.Scalars"),
				field("text", 8, opt, descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
				field("blob", 63, opt, descriptorpb.FieldDescriptorProto_TYPE_BYTES, ""),
				field("wide", 64, rep, descriptorpb.FieldDescriptorProto_TYPE_UINT64, ""),
				field("far", 1000, rep, descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
				field("last", int32(protowire.MaxValidNumber), opt, descriptorpb.FieldDescriptorProto_TYPE_FIXED64, ""),
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		panic(err)
	}
	return fd.Messages().ByName("Scalars")
}()

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
		// The node field twice, both empty: still a node, merged from two.
		[]byte{0x0a, 0x00, 0x0a, 0x00},
		// Packed: varints (one cut short), fixed32s (one byte too few),
		// fixed64s; then field 64 (past the dense table) packed, field
		// 1000 a string that is not UTF-8, and the largest field number.
		[]byte{0x0a, 0x03, 0x01, 0x80, 0x01, 0x12, 0x08, 1, 2, 3, 4, 5, 6, 7, 8, 0x1a, 0x08, 1, 2, 3, 4, 5, 6, 7, 8},
		[]byte{0x0a, 0x02, 0x01, 0x80},
		[]byte{0x12, 0x03, 1, 2, 3},
		[]byte{0x82, 0x04, 0x02, 0x01, 0x02, 0xc2, 0x3e, 0x01, 0xff, 0xf9, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3, 4, 5, 6, 7, 8},
	)
	for _, v := range []*structpb.Value{
		structpb.NewStringValue("x"),
		structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1), structpb.NewBoolValue(true)}}),
		structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewNullValue(), "b": structpb.NewStringValue("y")}}),
	} {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
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
		if ok != (d.Node != nil) || ok != (raw != nil) {
			t.Fatalf("% x: wireMessage found node %t (nil %t), decoded node %v", b, ok, raw == nil, d.Node)
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

// TestCheckWireDepthLimit holds checkWire to proto.Unmarshal's recursion
// limit, which berth's messages are too flat to reach: values nested just
// under it, at it, and over it, through repeated fields and through maps
// (which count a level more, and count it before the wire type is looked
// at).
func TestCheckWireDepthLimit(t *testing.T) {
	const limit = protowire.DefaultRecursionLimit
	// Field numbers of structpb: Value.struct_value, Value.list_value,
	// ListValue.values, Struct.fields.
	const valueStruct, valueList, listValues, structFields = 5, 6, 1, 1
	str := []byte{0x1a, 0x01, 'x'}                  // Value{string_value: "x"}
	emptyList := appendMessage(nil, valueList, nil) // Value{list_value: {}}
	for _, tc := range []struct {
		name string
		// levels is how many messages the encoding nests, the outermost
		// Value included; ok is whether proto.Unmarshal takes it.
		levels int
		b      []byte
		ok     bool
	}{
		{"lists at the limit", limit, nestValue(limit/2-1, valueList, listValues, emptyList), true},
		{"lists over the limit", limit + 1, nestValue(limit/2, valueList, listValues, str), false},
		// Value, Struct, map entry, Value, ...: three levels a round.
		{"maps at the limit", 3*(limit/3) + 1, nestMap(limit/3, str), true},
		{"maps over the limit", 3*(limit/3+1) + 1, nestMap(limit/3+1, str), false},
		// A Struct at the last level holding field 1 as a varint: an
		// unknown field, yet proto.Unmarshal counts the map level first.
		{"map field of another wire type at the limit", limit,
			nestValue(limit/2-1, valueList, listValues, appendMessage(nil, valueStruct, []byte{byte(structFields<<3 | protowire.VarintType), 0x01})), false},
		{"unknown field at the limit", limit,
			nestValue(limit/2-1, valueList, listValues, appendMessage(nil, valueStruct, []byte{0x10, 0x01})), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uerr := proto.Unmarshal(tc.b, &structpb.Value{})
			if (uerr == nil) != tc.ok {
				t.Fatalf("proto.Unmarshal of %d levels: %v; the test expects ok=%t", tc.levels, uerr, tc.ok)
			}
			werr := checkWire(wireSchemas["google.protobuf.Value"], tc.b)
			if (werr == nil) != tc.ok {
				t.Fatalf("checkWire of %d levels: %v; proto.Unmarshal: %v", tc.levels, werr, uerr)
			}
			// The error names the outer fields, not all ten thousand.
			if werr != nil && len(werr.Error()) > 1000 {
				t.Errorf("error of %d bytes: %.200s...", len(werr.Error()), werr)
			}
		})
	}
}

// nestValue wraps inner, the encoding of a Value, in rounds of two levels:
// a Value whose field outer holds a message whose field mid holds the
// previous encoding.
func nestValue(rounds int, outer, mid protowire.Number, inner []byte) []byte {
	return nest(inner, rounds, func(b, v []byte) []byte {
		return appendMessage(b, outer, appendMessage(nil, mid, v))
	})
}

// nestMap wraps inner, the encoding of a Value, in rounds of three levels:
// Value{struct_value: Struct{fields: {"k": previous}}}.
func nestMap(rounds int, inner []byte) []byte {
	return nest(inner, rounds, func(b, v []byte) []byte {
		entry := appendMessage([]byte{0x0a, 0x01, 'k'}, 2, v)
		return appendMessage(b, 5, appendMessage(nil, 1, entry))
	})
}

func nest(inner []byte, rounds int, wrap func(b, v []byte) []byte) []byte {
	for range rounds {
		inner = wrap(nil, inner)
	}
	return inner
}

func appendMessage(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// TestCompileWireRefusesWhatItCannotCheck: message types whose decoding
// needs more than a well-formed encoding make compileWire panic, rather
// than let checkWire accept what proto.Unmarshal refuses.
func TestCompileWireRefusesWhatItCannotCheck(t *testing.T) {
	group, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("berth/fsm/wire_group_test.proto"),
		Package: proto.String("berth.fsm.wiretest"),
		Syntax:  proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Outer"),
			Field: []*descriptorpb.FieldDescriptorProto{{
				Name: proto.String("inner"), Number: proto.Int32(1),
				Label:    descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
				Type:     descriptorpb.FieldDescriptorProto_TYPE_GROUP.Enum(),
				TypeName: proto.String(".berth.fsm.wiretest.Outer.Inner"),
			}},
			NestedType: []*descriptorpb.DescriptorProto{{Name: proto.String("Inner")}},
		}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		md      protoreflect.MessageDescriptor
		mention string
	}{
		{(&descriptorpb.UninterpretedOption_NamePart{}).ProtoReflect().Descriptor(), "required field"},
		{(&descriptorpb.FieldOptions{}).ProtoReflect().Descriptor(), "extension ranges"},
		{group.Messages().ByName("Outer"), "group"},
	} {
		func() {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, tc.mention) {
					t.Errorf("compileWire(%s) panicked with %v, want a panic mentioning %q", tc.md.FullName(), r, tc.mention)
				}
			}()
			compileWire(tc.md)
		}()
	}
}

// TestCheckWireUTF8FollowsEditions: in an editions file a string field may
// opt out of UTF-8 validation, and checkWire must then accept what
// proto.Unmarshal accepts.
func TestCheckWireUTF8FollowsEditions(t *testing.T) {
	str := func(name string, num int32, opts *descriptorpb.FieldOptions) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{
			Name: proto.String(name), Number: proto.Int32(num), Options: opts,
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			Type:  descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
		}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("berth/fsm/wire_editions_test.proto"),
		Package: proto.String("berth.fsm.wiretest"),
		Syntax:  proto.String("editions"),
		Edition: descriptorpb.Edition_EDITION_2023.Enum(),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Strings"),
			Field: []*descriptorpb.FieldDescriptorProto{
				str("checked", 1, nil),
				str("unchecked", 2, &descriptorpb.FieldOptions{Features: &descriptorpb.FeatureSet{
					Utf8Validation: descriptorpb.FeatureSet_NONE.Enum(),
				}}),
			},
		}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().ByName("Strings")
	schema := compileWire(md)
	for _, tc := range []struct {
		b  []byte
		ok bool
	}{
		{[]byte{0x0a, 0x01, 0xff}, false},
		{[]byte{0x12, 0x01, 0xff}, true},
	} {
		uerr := proto.Unmarshal(tc.b, dynamicpb.NewMessage(md))
		werr := checkWire(schema, tc.b)
		if (uerr == nil) != tc.ok || (werr == nil) != tc.ok {
			t.Errorf("% x: proto.Unmarshal %v, checkWire %v; want ok=%t from both", tc.b, uerr, werr, tc.ok)
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
