package agent

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// A driver config reads the same in a job file (HCL's JSON syntax, as a
// .json job file or /v1/jobs/parse?format=json) and in an API body: a
// number or boolean in a list or map stands for its text, 1.0 and 1e3 are
// whole numbers, and a null key is absent so its default applies.
func TestDriverConfigReadsAsInAJobFile(t *testing.T) {
	for _, cfg := range []string{
		`{"command": "x", "args": ["-p", 8080, true, 1.5, 1e3]}`,
		`{"command": "x", "env": {"PORT": 8080, "DEBUG": true, "R": 0.25}}`,
		`{"command": "x", "n": 1.0}`,
		`{"command": "x", "n": 1e3}`,
		`{"command": "x", "cwd": null}`,
		`{"command": "x", "n": 1.5}`, // refused by both
	} {
		hclJSON := `{"job": {"web": {"group": {"g": {"task": {"t": {"driver": "raw_exec", "config": ` + cfg + `}}}}}}}`
		job, herr := jobspec.Parse("job.json", []byte(hclJSON))
		api := &pb.Task{}
		aerr := apijson.Unmarshal([]byte(`{"config": `+cfg+`}`), api)
		if (herr == nil) != (aerr == nil) {
			t.Errorf("config %s: job file err=%v, API err=%v", cfg, herr, aerr)
			continue
		}
		if herr != nil {
			continue
		}
		if got, want := api.GetConfig(), job.GetGroups()[0].GetTasks()[0].GetConfig(); !proto.Equal(&pb.Task{Config: got}, &pb.Task{Config: want}) {
			t.Errorf("config %s: API read\n%v\njob file read\n%v", cfg, got, want)
		}
	}
}
