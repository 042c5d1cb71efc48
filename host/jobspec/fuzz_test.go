package jobspec

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// FuzzParse checks that Parse never panics; that it returns a job or
// *Errors whose every entry has a position; and that an accepted job passes
// ValidateJob (what the server runs on it) and survives a proto round trip
// (how it travels through raft).
func FuzzParse(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range seeds {
		if info, err := os.Stat(p); err != nil || info.IsDir() {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src, filepath.Ext(p) == ".json")
	}
	for _, s := range []string{
		"job \"a\" { group \"g\" { task \"t\" { driver = \"raw_exec\" config { command = \"x\" } } } }",
		"job \"a\" {\n group \"g\" {\n count = -1\n task \"t\" {\n driver = \"x\"\n }\n }\n}\n",
		"job \"a\" { constraint { distinct_hosts = true } }",
		"job \"a\" { group \"g\" { task \"t\" { env { A = \"${x.y}\" } config { m { a = 1 } } } } }",
		"job \"\" {}\njob \"\" {}",
		"job \"a\" { group \"g\" { volume \"v\" { mount_options { mount_flags = [1, true] } } } }",
		"job { group {",
		"job \"a\" { group \"g\" { volume \"v\" { type = \"host\" source = 1 } task \"t\" { volume_mount { volume = \"v\" propagation_mode = [] } } } }",
		"job \"a\" { priority = 1e99 }",
		"job \"a\" { group \"g\" { task \"t\" { config { a = \"${\"b\"}\" c = <<EOT\n${d}\nEOT\n } } } }",
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(`{"job": {"a": {"group": [{"g": {}}, {"g": {}}]}}}`), true)
	f.Add([]byte(`[{"job": {}}]`), true)

	drivers := map[string]*driverpb.Schema{"raw_exec": rawExecSchema}
	f.Fuzz(func(t *testing.T, src []byte, asJSON bool) {
		name := "fuzz.hcl"
		if asJSON {
			name = "fuzz.json"
		}
		for _, opts := range [][]Option{nil, {WithDrivers(drivers)}} {
			job, err := Parse(name, src, opts...)
			if (job == nil) == (err == nil) {
				t.Fatalf("Parse returned job %v and error %v", job, err)
			}
			if err != nil {
				var es *Errors
				if !errors.As(err, &es) || len(es.Errs) == 0 {
					t.Fatalf("error is %T %v, want a non-empty *Errors", err, err)
				}
				for _, e := range es.Errs {
					if !e.Pos.IsValid() {
						t.Errorf("error without a position: %v", e)
					}
					if e.Kind == nil {
						t.Errorf("error without a kind: %v", e)
					}
				}
				continue
			}
			if err := ValidateJob(job); err != nil {
				t.Fatalf("Parse accepted a job ValidateJob refuses: %v", err)
			}
			if opts != nil {
				if err := ValidateDrivers(job, drivers); err != nil {
					t.Fatalf("Parse with drivers accepted a job ValidateDrivers refuses: %v", err)
				}
			}
			b, err := proto.Marshal(job)
			if err != nil {
				t.Fatalf("proto.Marshal: %v", err)
			}
			back := &pb.Job{}
			if err := proto.Unmarshal(b, back); err != nil {
				t.Fatalf("proto.Unmarshal: %v", err)
			}
			if !proto.Equal(back, job) {
				t.Fatalf("proto round trip changed the job")
			}
		}
	})
}
