package apijson_test

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// TestTimesReadBackExactly: time.Parse drops fractional digits beyond the
// ninth, takes a decimal comma and a one-digit hour; the codec refuses all
// three, naming the path.
func TestTimesReadBackExactly(t *testing.T) {
	for _, c := range []struct{ at, want string }{
		{"2026-11-23T20:34:35.1234567891Z", `nodes[1].registered_at: time "2026-11-23T20:34:35.1234567891Z" has 10 fractional digits; at most 9`},
		{"2026-11-23T20:34:35.123456789000+01:00", `nodes[1].registered_at: time "2026-11-23T20:34:35.123456789000+01:00" has 12 fractional digits`},
		{"2026-11-23T20:34:35,5Z", `nodes[1].registered_at: time "2026-11-23T20:34:35,5Z" has a decimal comma; RFC 3339 separates the fraction of a second with '.'`},
		{"2026-11-23T20:34:35,123456789-07:00", `nodes[1].registered_at: time "2026-11-23T20:34:35,123456789-07:00" has a decimal comma`},
		// time.Parse reads a one-digit hour too.
		{"2026-11-23T0:34:35Z", `nodes[1].registered_at: time "2026-11-23T0:34:35Z" is not of the form 2026-11-23T20:34:35Z`},
	} {
		err := apijson.Unmarshal([]byte(`{"nodes": [{}, {"registered_at": "`+c.at+`"}]}`), &pb.NodeListResponse{})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: err = %v\nwant an error starting %q", c.at, err, c.want)
		}
	}
	// Nine digits, the most a nanosecond needs, read exactly, as do none.
	for at, want := range map[string]int64{
		"2026-11-23T20:34:35.123456789Z":      1_795_466_075_123_456_789,
		"2026-11-23T21:34:35.000000001+01:00": 1_795_466_075_000_000_001,
		"2026-11-23T20:34:35Z":                1_795_466_075_000_000_000,
	} {
		n := &pb.Node{}
		if err := apijson.Unmarshal([]byte(`{"registered_at": "`+at+`"}`), n); err != nil || n.GetRegisteredAt() != want {
			t.Errorf("%s = %d, %v; want %d", at, n.GetRegisteredAt(), err, want)
		}
	}
}

// TestBytesHaveOneSpelling: the standard decoder skips line breaks and
// ignores non-zero padding bits, so several strings would read as one value.
func TestBytesHaveOneSpelling(t *testing.T) {
	for _, c := range []struct{ data, want string }{
		{`AQ\nID`, `data: not standard base64: line break at byte 2`},
		{`AQID\n`, `data: not standard base64: line break at byte 4`},
		{`AQ\r\nID`, `data: not standard base64: line break at byte 2`},
		{`AR==`, `data: not standard base64: illegal base64 data at input byte 2`},
		{`AQ`, `data: not standard base64`},
		{`AQ-_`, `data: not standard base64`},
	} {
		err := apijson.Unmarshal([]byte(`{"data": "`+c.data+`"}`), &pb.SnapshotChunk{})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: err = %v\nwant an error starting %q", c.data, err, c.want)
		}
	}
	m := &pb.SnapshotChunk{}
	for data, want := range map[string][]byte{"AQID": {1, 2, 3}, "AQ==": {1}, "": {}} {
		if err := apijson.Unmarshal([]byte(`{"data": "`+data+`"}`), m); err != nil || !bytes.Equal(m.GetData(), want) {
			t.Errorf("%q = %v, %v; want %v", data, m.GetData(), err, want)
		}
	}
}

// TestMarshalRefusesNil: null is what a nil message would render as, and
// Unmarshal and UnmarshalList refuse it, so encoding refuses it first.
func TestMarshalRefusesNil(t *testing.T) {
	for name, m := range map[string]proto.Message{"nil": nil, "typed nil": (*pb.Node)(nil)} {
		b, err := apijson.Marshal(m)
		if err == nil || err.Error() != "nil message: it has no JSON object, and null would not read back" {
			t.Errorf("Marshal(%s) = %s, %v", name, b, err)
		}
	}
	b, err := apijson.MarshalList([]*pb.Node{{Id: "a"}, nil})
	if err == nil || err.Error() != "[1]: nil message: it has no JSON object, and null would not read back" {
		t.Errorf("MarshalList with a nil element = %s, %v", b, err)
	}
	// What the encoder would have written is indeed refused.
	if _, err := apijson.UnmarshalList([]byte(`[{"id": "a"}, null]`), func() *pb.Node { return &pb.Node{} }); err == nil {
		t.Error("UnmarshalList accepts a null element; the encoder may write one again")
	}
	if err := apijson.Unmarshal([]byte(`null`), &pb.Node{}); err == nil {
		t.Error("Unmarshal accepts null; the encoder may write it again")
	}
}

// timeFieldProblems lists the fields of the messages that are named like a
// time (*_at) but are not an int64 of unix nanoseconds: the codec knows a
// time by its name alone, so such a field would be written as a number or
// a string where the API documents an RFC 3339 time.
func timeFieldProblems(mds []protoreflect.MessageDescriptor) (problems []string, times int) {
	for _, md := range mds {
		fields := md.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if !strings.HasSuffix(string(fd.Name()), "_at") {
				continue
			}
			times++
			switch {
			case fd.IsMap():
				problems = append(problems, string(fd.FullName())+" is a map; only int64 fields are times")
			case fd.Kind() != protoreflect.Int64Kind && fd.Kind() != protoreflect.Sint64Kind && fd.Kind() != protoreflect.Sfixed64Kind:
				problems = append(problems, string(fd.FullName())+" is "+fd.Kind().String()+"; only int64 fields are times")
			}
		}
	}
	return problems, times
}

func TestTimeFieldsAreInt64(t *testing.T) {
	var mds []protoreflect.MessageDescriptor
	for _, mt := range pbMessages(t) {
		mds = append(mds, mt.Descriptor())
	}
	problems, times := timeFieldProblems(mds)
	for _, p := range problems {
		t.Errorf("%s (the JSON codec knows times by the name *_at: rename the field or make it int64 unix nanoseconds)", p)
	}
	// The walk saw the messages: Node alone has two times.
	if times < 5 {
		t.Fatalf("found only %d fields named *_at in rpc/pb", times)
	}

	// The check fails on what it is meant to catch: a message of a
	// made-up file with a string created_at and a map updated_at.
	str, i64 := descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_INT64
	opt, rep := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL, descriptorpb.FieldDescriptorProto_LABEL_REPEATED
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("bad.proto"), Package: proto.String("bad"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Job"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("created_at"), Number: proto.Int32(1), Type: &str, Label: &opt, JsonName: proto.String("createdAt")},
				{Name: proto.String("started_at"), Number: proto.Int32(2), Type: &i64, Label: &opt, JsonName: proto.String("startedAt")},
				{Name: proto.String("updated_at"), Number: proto.Int32(3), Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(),
					TypeName: proto.String(".bad.Job.UpdatedAtEntry"), Label: &rep, JsonName: proto.String("updatedAt")},
			},
			NestedType: []*descriptorpb.DescriptorProto{{
				Name: proto.String("UpdatedAtEntry"),
				Field: []*descriptorpb.FieldDescriptorProto{
					{Name: proto.String("key"), Number: proto.Int32(1), Type: &str, Label: &opt, JsonName: proto.String("key")},
					{Name: proto.String("value"), Number: proto.Int32(2), Type: &i64, Label: &opt, JsonName: proto.String("value")},
				},
				Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
			}},
		}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	problems, _ = timeFieldProblems([]protoreflect.MessageDescriptor{fd.Messages().Get(0)})
	want := "bad.Job.created_at is string; only int64 fields are times\nbad.Job.updated_at is a map; only int64 fields are times"
	if got := strings.Join(problems, "\n"); got != want {
		t.Fatalf("the check on a bad message found:\n%s\nwant:\n%s", got, want)
	}
}
