package apijson_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// pbMessages lists every message type generated into rpc/pb.
func pbMessages(t testing.TB) []protoreflect.MessageType {
	t.Helper()
	// Reference the package so its files are registered.
	_ = pb.File_berth_v1_node_proto
	var out []protoreflect.MessageType
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		if mt.Descriptor().ParentFile().Package() == "berth.v1" && !mt.Descriptor().IsMapEntry() {
			out = append(out, mt)
		}
		return true
	})
	if len(out) < 40 {
		t.Fatalf("found only %d message types in rpc/pb", len(out))
	}
	return out
}

// populate sets every field of m to a non-zero value; oneofs get member
// choice (cycling through members when choice exceeds their count).
func populate(m protoreflect.Message, choice, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if od.Fields().Get(choice%od.Fields().Len()) != fd {
				continue
			}
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for j := range 2 {
				l.Append(sample(l.NewElement, fd, j, choice, depth))
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for j := range 2 {
				mp.Set(sampleKey(fd.MapKey(), j), sample(mp.NewValue, fd.MapValue(), j, choice, depth))
			}
		case fd.Kind() == protoreflect.MessageKind:
			if depth < 4 {
				populate(m.Mutable(fd).Message(), choice, depth+1)
			}
		default:
			m.Set(fd, sample(nil, fd, 1, choice, depth))
		}
	}
}

func sample(newMsg func() protoreflect.Value, fd protoreflect.FieldDescriptor, j, choice, depth int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if j == 0 {
			return protoreflect.ValueOfEnum(99) // a value this version does not know
		}
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(math.MinInt32 + int32(j))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if strings.HasSuffix(string(fd.Name()), "_at") {
			return protoreflect.ValueOfInt64(1_795_466_075_610_000_001 + int64(j)) // 2026-11-23, to the nanosecond
		}
		return protoreflect.ValueOfInt64(math.MinInt64 + int64(j))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(math.MaxUint32 - uint32(j))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(math.MaxUint64 - uint64(j))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5 + float32(j))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(0.1 + float64(j))
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("a \"quoted\" \\ line\n\ttab é ✓ \u2028 \x01 <&>" + string(rune('A'+j)))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{0, 0xff, byte(j), '\n'})
	case protoreflect.MessageKind:
		v := newMsg()
		if depth < 4 {
			populate(v.Message(), choice, depth+1)
		}
		return v
	}
	panic("unhandled kind " + fd.Kind().String())
}

func sampleKey(fd protoreflect.FieldDescriptor, j int) protoreflect.MapKey {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString([]string{"zeta.key", "alpha \"key\""}[j]).MapKey()
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(j == 1).MapKey()
	}
	panic("unhandled map key kind " + fd.Kind().String())
}

func TestRoundTripEveryMessageType(t *testing.T) {
	for _, mt := range pbMessages(t) {
		name := string(mt.Descriptor().Name())
		variants := 1
		for i := range mt.Descriptor().Oneofs().Len() {
			variants = max(variants, mt.Descriptor().Oneofs().Get(i).Fields().Len())
		}
		for choice := range variants {
			msg := mt.New()
			populate(msg, choice, 0)
			b, err := apijson.Marshal(msg.Interface())
			if err != nil {
				t.Fatalf("%s: marshal: %v", name, err)
			}
			if !json.Valid(b) {
				t.Fatalf("%s: invalid JSON:\n%s", name, b)
			}
			got := mt.New().Interface()
			if err := apijson.Unmarshal(b, got); err != nil {
				t.Fatalf("%s: unmarshal: %v\n%s", name, err, b)
			}
			if !proto.Equal(got, msg.Interface()) {
				t.Fatalf("%s (oneof choice %d) does not round-trip:\n%s\ngot  %v\nwant %v", name, choice, b, got, msg.Interface())
			}
		}
		// The zero message round-trips too, and shows every field.
		zero := mt.New().Interface()
		b, err := apijson.Marshal(zero)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(obj) != mt.Descriptor().Fields().Len() {
			t.Fatalf("%s: zero message shows %d of %d fields:\n%s", name, len(obj), mt.Descriptor().Fields().Len(), b)
		}
		got := mt.New().Interface()
		if err := apijson.Unmarshal(b, got); err != nil || !proto.Equal(got, zero) {
			t.Fatalf("%s: zero message: %v, %v", name, err, got)
		}
	}
}

func TestZeroValuesArePresent(t *testing.T) {
	b, err := apijson.Marshal(&pb.Node{})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"id": "", "name": "", "status": "unspecified", "status_description": "", "status_updated_at": nil,
		"fingerprint": nil, "drivers": map[string]any{}, "http_addr": "", "registered_at": nil,
		"create_index": float64(0), "modify_index": float64(0),
		"eligibility": "unspecified", "drain": nil, "resources": nil, "meta": map[string]any{},
		"csi_controller_plugins": map[string]any{}, "csi_node_plugins": map[string]any{},
		"fenced": false, "fenced_at": nil, "host_volumes": map[string]any{}, "secret_hash": "", "readmitted": false, "has_secret": false,
	}
	for k, v := range want {
		gv, ok := got[k]
		if !ok {
			t.Errorf("field %s missing", k)
			continue
		}
		if gb, _ := json.Marshal(gv); string(gb) != mustJSON(v) {
			t.Errorf("%s = %s, want %s", k, gb, mustJSON(v))
		}
	}
	if len(got) != len(want) {
		t.Errorf("fields %v, want %v", got, want)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestEnumWords(t *testing.T) {
	ed := pb.NodeStatus(0).Descriptor()
	for n, want := range map[pb.NodeStatus]string{0: "unspecified", 1: "ready", 2: "down"} {
		if w, ok := apijson.EnumWord(ed, protoreflect.EnumNumber(n)); !ok || w != want {
			t.Errorf("EnumWord(%d) = %q, %v; want %q", n, w, ok, want)
		}
	}
	if _, ok := apijson.EnumWord(ed, 42); ok {
		t.Error("EnumWord(42) claims a word")
	}
	if got := strings.Join(apijson.EnumWords(ed, false), ","); got != "ready,down" {
		t.Errorf("EnumWords without zero = %s", got)
	}
	if got := strings.Join(apijson.EnumWords(pb.MemberStatus(0).Descriptor(), true), ","); got != "unspecified,alive,failed,left" {
		t.Errorf("MemberStatus words = %s", got)
	}
}

func TestUnmarshalAcceptsNumbersAndNull(t *testing.T) {
	n := &pb.Node{}
	err := apijson.Unmarshal([]byte(`{"status": 2, "modify_index": 18446744073709551615, "fingerprint": null,
		"registered_at": "2026-11-23T21:34:35.000000001+01:00", "status_updated_at": null, "drivers": null}`), n)
	if err != nil {
		t.Fatal(err)
	}
	if n.Status != pb.NodeStatus_NODE_STATUS_DOWN || n.ModifyIndex != math.MaxUint64 || n.Fingerprint != nil ||
		n.RegisteredAt != 1_795_466_075_000_000_001 || n.StatusUpdatedAt != 0 {
		t.Fatalf("decoded %v", n)
	}
}

func TestUnmarshalErrorsNameThePath(t *testing.T) {
	for _, c := range []struct {
		in   string
		msg  proto.Message
		want string
	}{
		{`{"nodes": [{}, {}, {}, {"status": "redy"}]}`, &pb.NodeListResponse{}, `nodes[3].status: unknown value "redy" (want one of unspecified, ready, down)`},
		{`{"nodes": [{"naem": "x"}]}`, &pb.NodeListResponse{}, `nodes[0].naem: unknown field of Node`},
		{`{"id": 5}`, &pb.Node{}, `id: expected a string, got the number 5`},
		{`{"modify_index": "12"}`, &pb.Node{}, `modify_index: expected a non-negative integer, got the string "12"`},
		{`{"modify_index": -1}`, &pb.Node{}, `modify_index: -1 is not an unsigned 64-bit integer`},
		{`{"modify_index": 18446744073709551616}`, &pb.Node{}, `modify_index: 18446744073709551616 is not an unsigned 64-bit integer`},
		{`{"modify_index": 1.5}`, &pb.Node{}, `modify_index: 1.5 is not an unsigned 64-bit integer`},
		{`{"registered_at": 1700000000}`, &pb.Node{}, `registered_at: expected an RFC 3339 time`},
		{`{"registered_at": "yesterday"}`, &pb.Node{}, `registered_at: "yesterday" is not an RFC 3339 time`},
		{`{"registered_at": "3000-01-01T00:00:00Z"}`, &pb.Node{}, `registered_at: time 3000-01-01T00:00:00Z is outside`},
		{`{"drivers": {"raw_exec": {"healthy": "yes"}}}`, &pb.Node{}, `drivers["raw_exec"].healthy: expected true or false, got the string "yes"`},
		{`{"drivers": {"raw_exec": null}}`, &pb.Node{}, `drivers["raw_exec"]: null is not a valid map value`},
		{`{"fingerprint": {"attributes": {"a": 1}}}`, &pb.Node{}, `fingerprint.attributes["a"]: expected a string`},
		{`{"id": "a", "id": "b"}`, &pb.Node{}, `id: field given twice`},
		{`{"node": {}, "server": {}}`, &pb.SnapshotRecord{}, `server: node and server are both set, but only one of record may be`},
		{`{"data": "***"}`, &pb.SnapshotChunk{}, `data: not standard base64`},
		{`[]`, &pb.Node{}, `expected an object, got an array`},
		{`{} {}`, &pb.Node{}, `unexpected data after the JSON value`},
		{`{"id": `, &pb.Node{}, `id: unexpected end of JSON`},
		{`{"status": 4294967296}`, &pb.Node{}, `status: enum number 4294967296 is not a 32-bit integer`},
		// The scanner's own syntax checks.
		{`{"name": "a` + "\n" + `b"}`, &pb.Node{}, `name: invalid JSON at offset 11: control character 0xa in a string`},
		{`{"name": "\x"}`, &pb.Node{}, `name: invalid JSON at offset 12: invalid escape \x`},
		{`{"name": "\ud83d"}`, &pb.Node{}, `name: invalid JSON`},
		{"{\"name\": \"\xff\"}", &pb.Node{}, `name: invalid JSON at offset 11: string is not valid UTF-8`},
		{`{"cpu_cores": 01}`, &pb.NodeFingerprint{}, `expected ',' or '}' after a value, got the number 1`},
		{`{"cpu_cores": 1.}`, &pb.NodeFingerprint{}, `cpu_cores: invalid JSON`},
		{`{"cpu_cores": -}`, &pb.NodeFingerprint{}, `cpu_cores: invalid JSON`},
		{`{"cpu_cores": 1e5}`, &pb.NodeFingerprint{}, `cpu_cores: 1e5 is not a 32-bit integer`},
		{`{"os": "linux",}`, &pb.NodeFingerprint{}, `expected a quoted field name, got '}'`},
		{`{"os" "linux"}`, &pb.NodeFingerprint{}, `expected ':' after "os"`},
		{`{"os": "linux" "arch": "x"}`, &pb.NodeFingerprint{}, `expected ',' or '}' after a value, got the string "arch"`},
		{`{"nodes": [{},]}`, &pb.NodeListResponse{}, `nodes[1]: expected an object, got ']'`},
		{`{"nodes": [{} {}]}`, &pb.NodeListResponse{}, `nodes: expected ',' or ']' after an item, got an object`},
		{`{"detected": tru}`, &pb.DriverInfo{}, `detected: invalid JSON at offset 13: invalid literal (want true)`},
	} {
		err := apijson.Unmarshal([]byte(c.in), c.msg)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Unmarshal(%s) = %v\nwant an error starting %q", c.in, err, c.want)
		}
	}
	_, err := apijson.UnmarshalList([]byte(`[{"status": "ready"}, {"status": true}]`), func() *pb.Node { return &pb.Node{} })
	if err == nil || err.Error() != `[1].status: expected a word such as "ready", got true` {
		t.Errorf("UnmarshalList error = %v", err)
	}
}

func TestMarshalRefusesInvalidUTF8(t *testing.T) {
	_, err := apijson.Marshal(&pb.Node{Fingerprint: &pb.NodeFingerprint{Attributes: map[string]string{"k": "\xff"}}})
	if err == nil || err.Error() != `fingerprint.attributes["k"]: string is not valid UTF-8` {
		t.Fatalf("err = %v", err)
	}
}

func TestListsAreArrays(t *testing.T) {
	b, err := apijson.MarshalList([]*pb.Node{})
	if err != nil || string(b) != "[]" {
		t.Fatalf("empty list = %s, %v", b, err)
	}
	nodes, err := apijson.UnmarshalList([]byte("[]"), func() *pb.Node { return &pb.Node{} })
	if err != nil || nodes == nil || len(nodes) != 0 {
		t.Fatalf("UnmarshalList([]) = %v, %v", nodes, err)
	}
	b, err = apijson.MarshalList([]*pb.Node{{Id: "a"}, {Id: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err = apijson.UnmarshalList(b, func() *pb.Node { return &pb.Node{} })
	if err != nil || len(nodes) != 2 || nodes[0].Id != "a" || nodes[1].Id != "b" {
		t.Fatalf("UnmarshalList = %v, %v", nodes, err)
	}
}
