package apijson_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// fuzzTypes are the messages FuzzUnmarshal decodes into: the API's objects
// and lists, and one with a oneof and bytes.
var fuzzTypes = []func() proto.Message{
	func() proto.Message { return &pb.Node{} },
	func() proto.Message { return &pb.NodeListResponse{} },
	func() proto.Message { return &pb.RaftConfigurationResponse{} },
	func() proto.Message { return &pb.AgentSelf{} },
	func() proto.Message { return &pb.SnapshotRecord{} },
	func() proto.Message { return &pb.SnapshotChunk{} },
	func() proto.Message { return &pb.TaskHandleRecord{} },
	func() proto.Message { return &pb.Task{} },
}

// FuzzUnmarshal checks that Unmarshal never panics and that whatever it
// accepts marshals again and decodes to an equal message.
func FuzzUnmarshal(f *testing.F) {
	goldens, _ := filepath.Glob(filepath.Join("testdata", "*.golden"))
	for _, g := range goldens {
		b, err := os.ReadFile(g)
		if err != nil {
			f.Fatal(err)
		}
		for i := range fuzzTypes {
			f.Add(uint8(i), b)
		}
	}
	f.Add(uint8(4), []byte(`{"node": {"status": 2}, "server": null}`))
	f.Add(uint8(5), []byte(`{"data": "AP8K"}`))
	f.Add(uint8(0), []byte(`{"registered_at": "1970-01-01T00:00:00Z", "status": 9}`))
	f.Add(uint8(0), []byte(`{"name": "a\u00e9\ud83d\ude00\n\"\/", "fingerprint": {"cpu_cores": -0, "memory_bytes": 0}}`))
	f.Add(uint8(7), []byte(`{"config": {"command": "sh", "args": ["-c", "x"], "n": -1, "b": true, "m": {"k": "v"}, "e": null, "l": []}}`))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		newMsg := fuzzTypes[int(which)%len(fuzzTypes)]
		m := newMsg()
		if err := apijson.Unmarshal(data, m); err != nil {
			return
		}
		// apijson has its own scanner: it must accept nothing that is not JSON.
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		b, err := apijson.Marshal(m)
		if err != nil {
			t.Fatalf("accepted %q but cannot marshal %v: %v", data, m, err)
		}
		again := newMsg()
		if err := apijson.Unmarshal(b, again); err != nil {
			t.Fatalf("cannot decode own output %s: %v", b, err)
		}
		if !proto.Equal(m, again) {
			t.Fatalf("round trip changed the message:\nfirst  %v\nsecond %v\njson %s", m, again, b)
		}
	})
}
