package volumespec

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// FuzzParse checks that Parse never panics; that it returns a volume or
// *Errors whose every entry has a position and a kind; and that an
// accepted volume passes Validate (what the servers run on it) and
// survives a proto round trip (how it travels through raft).
func FuzzParse(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range seeds {
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src, filepath.Ext(p) == ".json", true)
	}
	for _, s := range []string{
		"id = \"v\"\nplugin_id = \"p\"\nexternal_id = \"e\"\ncapability {\n access_mode = \"single-node-writer\"\n attachment_mode = \"file-system\"\n}\n",
		"id = \"v\" capability { access_mode = 1 } capability {}",
		"capacity_min = 1e99\ncapacity_max = \"-5 GiB\"",
		"topology_request { required { topology { segments { a = 1 } } } preferred {} }",
		"secrets { a = \"${b}\" }\nsecrets {}",
		"mount_options { mount_flags = [1, true] }",
		"id = \"a/b\"\nname = \"\"\n",
	} {
		f.Add([]byte(s), false, false)
	}
	f.Add([]byte(`{"capability": [{"access_mode": "x"}], "context": {"k": 1}}`), true, true)
	f.Fuzz(func(t *testing.T, src []byte, asJSON, create bool) {
		name, mode := "fuzz.hcl", ForRegister
		if asJSON {
			name = "fuzz.json"
		}
		if create {
			mode = ForCreate
		}
		v, err := Parse(name, src, mode)
		if (v == nil) == (err == nil) {
			t.Fatalf("Parse returned volume %v and error %v", v, err)
		}
		if err != nil {
			var es *Errors
			if !errors.As(err, &es) || len(es.Errs) == 0 {
				t.Fatalf("error is %T %v, want a non-empty *Errors", err, err)
			}
			for _, e := range es.Errs {
				if !e.Pos.IsValid() || e.Kind == nil {
					t.Errorf("error without a position or kind: %#v", e)
				}
			}
			return
		}
		if err := Validate(v, mode); err != nil {
			t.Fatalf("Parse accepted a volume Validate refuses: %v", err)
		}
		b, err := proto.Marshal(v)
		if err != nil {
			t.Fatalf("proto.Marshal: %v", err)
		}
		back := &pb.Volume{}
		if err := proto.Unmarshal(b, back); err != nil || !proto.Equal(back, v) {
			t.Fatalf("proto round trip: %v", err)
		}
	})
}
