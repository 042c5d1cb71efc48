package taskenv

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

func testInput() Input {
	return Input{
		Node: Node{ID: "node-1", Name: "n1", Attributes: map[string]string{"kernel.name": "linux", "cpu.arch": "amd64"},
			Meta: map[string]string{"rack": "r7"}},
		Alloc: &pb.Allocation{Id: "alloc-1", Name: "web.api[2]", Index: 2},
		Job:   &pb.Job{Id: "web", Name: "Web", Meta: map[string]string{"owner": "job", "tier": "front"}},
		Group: &pb.TaskGroup{Name: "api", Meta: map[string]string{"owner": "group"}},
		Task: &pb.Task{Name: "server", Resources: &pb.TaskResources{CpuMhz: 250, MemoryMb: 128},
			Meta: map[string]string{"owner": "task", "build-id": "b1"},
			Env: map[string]string{
				"GREETING":       "hi from ${node.unique.name}",
				"DATA":           "${BERTH_ALLOC_DIR}/data",
				"BERTH_TASK_DIR": "/nope",
				"SELF":           "${GREETING}",
			}},
		AllocDir: "/d/alloc/alloc-1/alloc", TaskDir: "/d/alloc/alloc-1/server/local", SecretsDir: "/d/alloc/alloc-1/server/secrets",
	}
}

func TestBuildEnv(t *testing.T) {
	env := Build(testInput()).Map()
	want := map[string]string{
		"BERTH_ALLOC_ID":      "alloc-1",
		"BERTH_ALLOC_NAME":    "web.api[2]",
		"BERTH_ALLOC_INDEX":   "2",
		"BERTH_ALLOC_DIR":     "/d/alloc/alloc-1/alloc",
		"BERTH_TASK_DIR":      "/d/alloc/alloc-1/server/local", // the task's env cannot override it
		"BERTH_SECRETS_DIR":   "/d/alloc/alloc-1/server/secrets",
		"BERTH_TASK_NAME":     "server",
		"BERTH_GROUP_NAME":    "api",
		"BERTH_JOB_ID":        "web",
		"BERTH_JOB_NAME":      "Web",
		"BERTH_NODE_ID":       "node-1",
		"BERTH_NODE_NAME":     "n1",
		"BERTH_CPU_LIMIT":     "250",
		"BERTH_MEMORY_LIMIT":  "128",
		"BERTH_META_owner":    "task",
		"BERTH_META_OWNER":    "task",
		"BERTH_META_tier":     "front",
		"BERTH_META_TIER":     "front",
		"BERTH_META_build-id": "b1",
		"BERTH_META_BUILD_ID": "b1",
		"GREETING":            "hi from n1",
		"DATA":                "/d/alloc/alloc-1/alloc/data",
		"SELF":                "${GREETING}", // task env is not interpolated against itself
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(want) {
		t.Errorf("env has %d variables, want %d: %v", len(env), len(want), env)
	}
}

func TestReplace(t *testing.T) {
	e := Build(testInput()).WithVars(map[string]string{"volume.data": "/csi/publish/a/v"}).WithEnv(map[string]string{"EXTRA": "x"})
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"${node.unique.id}", "node-1"},
		{"${node.unique.name}-${attr.kernel.name}", "n1-linux"},
		{"rack=${meta.rack}", "rack=r7"},
		{"${BERTH_ALLOC_ID}/${env.BERTH_TASK_NAME}", "alloc-1/server"},
		{"${GREETING}!", "hi from n1!"},
		{"${EXTRA}", "x"},
		{"${volume.data}/db", "/csi/publish/a/v/db"},
		{"${attr.missing} and ${meta.none} and ${HOME}", "${attr.missing} and ${meta.none} and ${HOME}"},
		{"unterminated ${node.unique.id", "unterminated ${node.unique.id"},
		{"$node.unique.id ${}", "$node.unique.id ${}"},
		{"${${node.unique.id}}", "${${node.unique.id}}"},
		{"a${BERTH_NODE_NAME}b${BERTH_NODE_ID}c", "an1bnode-1c"},
	} {
		if got := e.Replace(tc.in); got != tc.want {
			t.Errorf("Replace(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestReplaceIsOnePass(t *testing.T) {
	e := Build(testInput()).WithEnv(map[string]string{"LOOP": "${LOOP}", "REF": "${node.unique.id}"})
	if got := e.Replace("${LOOP} ${REF}"); got != "${LOOP} ${node.unique.id}" {
		t.Fatalf("got %q: a value holding ${...} was expanded again", got)
	}
}

func TestReplaceConfig(t *testing.T) {
	e := Build(testInput())
	in := sdk.ConfigMap{
		"command": sdk.StringValue("${BERTH_TASK_DIR}/bin/run"),
		"args":    sdk.ListValue("--node", "${node.unique.id}", "${unknown}"),
		"labels":  sdk.MapValue(map[string]string{"rack": "${meta.rack}"}),
		"port":    sdk.IntValue(8080),
		"debug":   sdk.BoolValue(true),
	}
	orig := proto.Clone(&driverpb.PluginConfig{Values: in})
	got := e.ReplaceConfig(in)
	want := sdk.ConfigMap{
		"command": sdk.StringValue("/d/alloc/alloc-1/server/local/bin/run"),
		"args":    sdk.ListValue("--node", "node-1", "${unknown}"),
		"labels":  sdk.MapValue(map[string]string{"rack": "r7"}),
		"port":    sdk.IntValue(8080),
		"debug":   sdk.BoolValue(true),
	}
	if !proto.Equal(&driverpb.PluginConfig{Values: got}, &driverpb.PluginConfig{Values: want}) {
		t.Fatalf("ReplaceConfig = %v, want %v", got, want)
	}
	if !proto.Equal(&driverpb.PluginConfig{Values: in}, orig) {
		t.Fatal("ReplaceConfig changed its input")
	}
}

func TestNodeAttributes(t *testing.T) {
	n := &pb.Node{Id: "n", Fingerprint: &pb.NodeFingerprint{
		Hostname: "h", Os: "linux", Arch: "arm64", CpuCores: 4, CpuTotalMhz: 8000, MemoryBytes: 1 << 30,
		BerthVersion: "0.1.0", Attributes: map[string]string{"kernel.version": "6.1"},
	}, Drivers: map[string]*pb.DriverInfo{
		"raw_exec": {Detected: true, Healthy: true}, "mock": {Detected: true}, "gone": {},
	}}
	got := NodeAttributes(n)
	want := map[string]string{
		"kernel.version": "6.1", "kernel.name": "linux", "cpu.arch": "arm64", "cpu.numcores": "4",
		"cpu.totalcompute": "8000", "memory.totalbytes": "1073741824", "unique.hostname": "h",
		"berth.version": "0.1.0", "driver.raw_exec": "1", "driver.mock": "0",
	}
	if len(got) != len(want) {
		t.Errorf("attributes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attr %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestWithDefaultsSetsPathOnlyWhenMissing(t *testing.T) {
	e := Build(testInput()).WithDefaults()
	if p, _ := e.Get("PATH"); p != DefaultPath {
		t.Fatalf("PATH = %q", p)
	}
	in := testInput()
	in.Task.Env["PATH"] = "/opt/bin"
	if p, _ := Build(in).WithDefaults().Get("PATH"); p != "/opt/bin" {
		t.Fatalf("PATH = %q, want the task's", p)
	}
}

func FuzzReplace(f *testing.F) {
	f.Add("${node.unique.id}")
	f.Add("${a${b}}${")
	f.Fuzz(func(t *testing.T, s string) {
		// Must not panic with variables known either.
		Build(testInput()).Replace(s)
		// No variables known: the text comes back unchanged.
		if empty := (&Env{}); empty.Replace(s) != s {
			t.Fatalf("Replace with no variables changed %q to %q", s, empty.Replace(s))
		}
	})
}
