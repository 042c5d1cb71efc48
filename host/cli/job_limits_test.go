package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// job validate checks a file against the limits of the server the agent
// runs, naming the position, the value, the limit and its config key; an
// agent with no server leaves the defaults, and says so.
func TestJobValidateChecksTheServersLimits(t *testing.T) {
	f := newFakeCluster(t)
	f.nodes[nodeA] = &pb.Node{Id: nodeA, Drivers: map[string]*pb.DriverInfo{"mock": {Name: "mock", Healthy: true, TaskSchema: &driverpb.Schema{}}}}
	f.jobLimits = jobspec.Limits{MaxGroupCount: 3}.Proto()
	file := filepath.Join(t.TempDir(), "web.hcl")
	write := func(count string) {
		src := "job \"web\" {\n  group \"g\" {\n    count = " + count + "\n    task \"t\" {\n      driver = \"mock\"\n    }\n  }\n}\n"
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("3")
	_, errOut := wantOutErr(t, []string{"job", "validate", "-address", f.url, file}, 0, `Job "web" is valid`)
	if errOut != "" {
		t.Fatalf("validate at the limit said %q", errOut)
	}
	write("4")
	wantOut(t, []string{"job", "validate", "-address", f.url, file}, 1,
		file+`:3:5: group "g": count: 4 is over the limit of 3 per group (server.job_max_count)`)

	f.jobLimits = nil
	write("2147483647")
	_, errOut = wantOutErr(t, []string{"job", "validate", "-address", f.url, file}, 1,
		file+`:3:5: group "g": count: 2147483647 is over the limit of 1000 per group (server.job_max_count)`)
	if !strings.Contains(errOut, "Job limits checked are the defaults: the agent at "+f.url+" runs no server") {
		t.Fatalf("validate against a client-only agent said %q", errOut)
	}
}
