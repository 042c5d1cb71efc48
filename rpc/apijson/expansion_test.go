package apijson_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// fill sets every field of m reachable from it to a small value of its
// kind, with lists and maps of n elements: the shapes where a field's name
// weighs most against its encoding. long makes every string a run of
// control characters instead, each written \u00XX.
func fill(m protoreflect.Message, n int, long bool, depth int) {
	if cv, ok := m.Interface().(*driverpb.ConfigValue); ok {
		cv.Kind = &driverpb.ConfigValue_DurationNanos{DurationNanos: -int64(time.Hour * 2000000)}
		return
	}
	str := "x"
	if long {
		str = "\x01\x01\x01\x01\x01\x01\x01\x01"
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic() && fd.ContainingOneof().Fields().Get(0) != fd {
			continue
		}
		scalar := func(fd protoreflect.FieldDescriptor) protoreflect.Value {
			switch fd.Kind() {
			case protoreflect.BoolKind:
				return protoreflect.ValueOfBool(true)
			case protoreflect.EnumKind:
				vs := fd.Enum().Values()
				return protoreflect.ValueOfEnum(vs.Get(vs.Len() - 1).Number())
			case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
				return protoreflect.ValueOfInt32(-1)
			case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
				return protoreflect.ValueOfInt64(1)
			case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
				return protoreflect.ValueOfUint32(1)
			case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
				return protoreflect.ValueOfUint64(1)
			case protoreflect.FloatKind:
				return protoreflect.ValueOfFloat32(-3.4028235e+38)
			case protoreflect.DoubleKind:
				return protoreflect.ValueOfFloat64(-1.7976931348623157e+308)
			case protoreflect.StringKind:
				return protoreflect.ValueOfString(str)
			case protoreflect.BytesKind:
				return protoreflect.ValueOfBytes([]byte(str))
			}
			panic(fd.Kind())
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for k := range n {
				key := protoreflect.ValueOfString(string(rune('a' + k))).MapKey()
				if fd.MapKey().Kind() != protoreflect.StringKind {
					continue
				}
				if fd.MapValue().Message() != nil {
					v := mp.NewValue()
					if depth < 6 {
						fill(v.Message(), n, long, depth+1)
					}
					mp.Set(key, v)
				} else {
					mp.Set(key, scalar(fd.MapValue()))
				}
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range n {
				if fd.Message() != nil {
					v := l.NewElement()
					if depth < 6 {
						fill(v.Message(), n, long, depth+1)
					}
					l.Append(v)
				} else {
					l.Append(scalar(fd))
				}
			}
		case fd.Message() != nil:
			if depth < 6 {
				fill(m.Mutable(fd).Message(), n, long, depth+1)
			}
		default:
			m.Set(fd, scalar(fd))
		}
	}
}

// A register request's compact JSON stays within MaxExpansion's bound of
// its encoded size, whatever its shape: many small fields with long names,
// many long strings of escaped characters. The agent's body limit rests on
// it.
func TestMaxExpansionBoundsCompactJSON(t *testing.T) {
	factor, slack := apijson.MaxExpansion((&pb.JobRegisterRequest{}).ProtoReflect().Descriptor())
	if factor < 6 || factor > 16 || slack > 4096 {
		t.Fatalf("MaxExpansion = %d per byte + %d: not a useful bound", factor, slack)
	}
	for _, n := range []int{1, 3, 20} {
		for _, long := range []bool{false, true} {
			req := &pb.JobRegisterRequest{}
			fill(req.ProtoReflect(), n, long, 0)
			b, err := apijson.MarshalCompact(req)
			if err != nil {
				t.Fatal(err)
			}
			size := proto.Size(req)
			if len(b) > factor*size+slack {
				t.Errorf("lists of %d, long strings %v: %d bytes of JSON from %d encoded, over %d x %d + %d", n, long, len(b), size, factor, size, slack)
			}
			t.Logf("lists of %d, long strings %v: %d bytes of JSON from %d encoded (%.1f per byte)", n, long, len(b), size, float64(len(b))/float64(size))
			got := &pb.JobRegisterRequest{}
			if err := apijson.Unmarshal(b, got); err != nil {
				t.Fatalf("compact JSON does not read back: %v", err)
			}
		}
	}
}

// Compact JSON is Marshal's without the indentation and the defaults, and
// reads back as the same message.
func TestMarshalCompactReadsBack(t *testing.T) {
	in := &pb.JobRegisterRequest{Job: &pb.Job{Id: "web", Priority: 50, Groups: []*pb.TaskGroup{{Name: "g", Count: 1,
		Tasks: []*pb.Task{{Name: "t", Driver: "raw_exec", Config: map[string]*driverpb.ConfigValue{"args": {Kind: &driverpb.ConfigValue_ListValue{ListValue: &driverpb.StringList{Values: []string{"", "-p"}}}}}}}}}}}
	b, err := apijson.MarshalCompact(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"job":{"id":"web","priority":50,"groups":[{"name":"g","count":1,"tasks":[{"name":"t","driver":"raw_exec","config":{"args":["","-p"]}}]}]}}`
	if string(b) != want {
		t.Fatalf("MarshalCompact =\n%s\nwant\n%s", b, want)
	}
	got := &pb.JobRegisterRequest{}
	if err := apijson.Unmarshal(b, got); err != nil || !proto.Equal(got, in) {
		t.Fatalf("read back %v (%v), want %v", got, err, in)
	}
}
