package jobspec

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// mustParse parses src as name and fails the test on any error.
func mustParse(t *testing.T, name, src string, opts ...Option) *pb.Job {
	t.Helper()
	job, err := Parse(name, []byte(src), opts...)
	if err != nil {
		t.Fatalf("Parse(%s):\n%v", name, err)
	}
	return job
}

func requireEqual(t *testing.T, what string, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Errorf("%s:\n got: %s\nwant: %s", what, prototext.Format(got), prototext.Format(want))
	}
}

// fullJob is what testdata/full.hcl and testdata/full.json describe: every
// block and argument a job spec has, none left to its default except where
// noted.
func fullJob(source string) *pb.Job {
	return &pb.Job{
		Id: "full", Name: "Full example", Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 70,
		Meta: map[string]string{"team": "storage"},
		Constraints: []*pb.Constraint{
			{Attribute: "${attr.kernel.name}", Operator: "=", Value: "linux"},
			{Operator: "distinct_hosts", Value: "true"},
		},
		Update:     &pb.UpdateStrategy{MaxParallel: 2, MinHealthyMs: 15000},
		SourceFile: source,
		Groups: []*pb.TaskGroup{
			{
				Name: "db", Count: 3,
				Restart:    &pb.RestartPolicy{Attempts: 5, IntervalMs: 600000, DelayMs: 20000, Mode: pb.RestartMode_RESTART_MODE_DELAY},
				Reschedule: &pb.ReschedulePolicy{Attempts: 4, IntervalMs: 7200000, DelayMs: 60000, MaxDelayMs: 1800000},
				Constraints: []*pb.Constraint{
					{Attribute: "${driver.raw_exec.version}", Operator: "version", Value: ">= 1.2, < 2"},
					{Attribute: "${node.unique.name}", Operator: "regexp", Value: "^db-[0-9]+$"},
					{Attribute: "${meta.ssd}", Operator: "is_set"},
				},
				// The group's update block inherits what it leaves out from the job's.
				Update: &pb.UpdateStrategy{MaxParallel: 2, MinHealthyMs: 30000},
				Meta:   map[string]string{"shard": "7"},
				Volumes: map[string]*pb.VolumeRequest{"data": {
					Name: "data", Type: "csi", Source: "db-data", AccessMode: "single-node-writer",
					AttachmentMode: "file-system", PerAlloc: true,
					MountOptions: &pb.MountOptions{FsType: "ext4", MountFlags: []string{"noatime", "nodiratime"}},
				}, "scratch": {Name: "scratch", Type: "host", Source: "fast-disk", Sticky: true}},
				Tasks: []*pb.Task{
					{
						Name: "init", Driver: "raw_exec",
						Config:        sdk.ConfigMap{"command": sdk.StringValue("/bin/true")},
						Resources:     &pb.TaskResources{CpuMhz: 100, MemoryMb: 300},
						KillTimeoutMs: 5000, KillSignal: "SIGTERM",
						Lifecycle: &pb.Lifecycle{Hook: pb.TaskHook_TASK_HOOK_PRESTART},
						Logs:      &driverpb.LogConfig{MaxFiles: 10, MaxFileSizeBytes: 10 << 20},
					},
					{
						Name: "server", Driver: "raw_exec", Leader: true, User: "nobody",
						KillTimeoutMs: 30000, KillSignal: "SIGINT",
						Config: sdk.ConfigMap{
							"command":  sdk.StringValue("/usr/bin/db"),
							"args":     sdk.ListValue("--port", "5432", "--verbose", "true"),
							"workers":  sdk.IntValue(4),
							"debug":    sdk.BoolValue(false),
							"labels":   sdk.MapValue(map[string]string{"tier": "db", "replicas": "3"}),
							"port_map": sdk.MapValue(map[string]string{"db": "5432"}),
						},
						Env:       map[string]string{"DATA_DIR": "${volume.data}", "PORT": "5432"},
						Meta:      map[string]string{"role": "primary"},
						Resources: &pb.TaskResources{CpuMhz: 500, MemoryMb: 1024},
						Constraints: []*pb.Constraint{
							{Attribute: "${attr.cpu.arch}", Operator: "!=", Value: "arm"},
						},
						VolumeMounts: []*pb.VolumeMount{{Volume: "data", Destination: "/srv/data", ReadOnly: true},
							{Volume: "scratch", Destination: "/srv/scratch", PropagationMode: "host-to-task"}},
						Logs: &driverpb.LogConfig{MaxFiles: 3, MaxFileSizeBytes: 20 << 20},
					},
				},
			},
			{
				Name: "plugins", Count: 1,
				Restart:    DefaultRestart(pb.JobType_JOB_TYPE_SERVICE),
				Reschedule: DefaultReschedule(pb.JobType_JOB_TYPE_SERVICE),
				Tasks: []*pb.Task{{
					Name: "csi", Driver: "raw_exec",
					Config:        sdk.ConfigMap{"command": sdk.StringValue("/usr/bin/csi-plugin")},
					Resources:     &pb.TaskResources{CpuMhz: 100, MemoryMb: 300},
					KillTimeoutMs: 5000, KillSignal: "SIGTERM",
					CsiPlugin: &pb.CSIPluginConfig{
						Id: "hostpath", Type: "monolith", MountDir: "/csi",
						StagePublishBaseDir: "/local/csi", HealthTimeoutMs: 45000,
					},
					Logs: &driverpb.LogConfig{MaxFiles: 10, MaxFileSizeBytes: 10 << 20},
				}},
			},
		},
	}
}

func TestParseEveryBlock(t *testing.T) {
	for _, name := range []string{"testdata/full.hcl", "testdata/full.json"} {
		t.Run(filepath.Ext(name), func(t *testing.T) {
			job, err := ParseFile(name)
			if err != nil {
				t.Fatal(err)
			}
			requireEqual(t, name, job, fullJob(name))
		})
	}
}

// The JSON syntax reads into the same job as HCL, field for field, so that
// what `job inspect -json` prints can be run again.
func TestJSONEquivalentToHCL(t *testing.T) {
	for _, base := range []string{"full"} {
		h, err := ParseFile("testdata/" + base + ".hcl")
		if err != nil {
			t.Fatal(err)
		}
		jsonFile := "testdata/" + base + ".json"
		if _, err := os.Stat(jsonFile); err != nil {
			continue
		}
		j, err := ParseFile(jsonFile)
		if err != nil {
			t.Fatal(err)
		}
		h.SourceFile, j.SourceFile = "", ""
		requireEqual(t, base, j, h)
	}
}

func TestExampleJobs(t *testing.T) {
	drivers := map[string]*driverpb.Schema{"raw_exec": rawExecSchema}
	web, err := ParseFile("../../examples/jobs/web.hcl", WithDrivers(drivers))
	if err != nil {
		t.Fatal(err)
	}
	if web.GetType() != pb.JobType_JOB_TYPE_SERVICE || len(web.GetGroups()) != 1 || web.GetGroups()[0].GetCount() != 2 {
		t.Errorf("web: want a service job with one group of count 2, got %s", prototext.Format(web))
	}
	task := web.GetGroups()[0].GetTasks()[0]
	if task.GetConfig()["command"].GetStringValue() != "sleep" || task.GetEnv()["GREETING"] != "hello from ${node.unique.name}" {
		t.Errorf("web: task config %v env %v", task.GetConfig(), task.GetEnv())
	}
	sys, err := ParseFile("../../examples/jobs/node-agent.hcl", WithDrivers(drivers))
	if err != nil {
		t.Fatal(err)
	}
	if sys.GetType() != pb.JobType_JOB_TYPE_SYSTEM || sys.GetGroups()[0].GetCount() != 1 || sys.GetGroups()[0].GetReschedule() != nil {
		t.Errorf("node-agent: want a system job, count 1, no reschedule; got %s", prototext.Format(sys))
	}
}

// rawExecSchema is raw_exec's task schema as builtin/drivers/rawexec
// declares it (jobspec may not import the built-in drivers).
var rawExecSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "command", Type: sdk.TypeString, Required: true},
	{Name: "args", Type: sdk.TypeList},
	{Name: "cwd", Type: sdk.TypeString},
}}

func TestDefaults(t *testing.T) {
	const task = `task "t" {
      driver = "raw_exec"
      config { command = "x" }
    }`
	group := func(typ, body string) string {
		return "job \"j\" {\n  " + typ + "\n  group \"g\" {\n    " + body + "\n    " + task + "\n  }\n}\n"
	}
	for _, tc := range []struct {
		name  string
		src   string
		check func(t *testing.T, j *pb.Job)
	}{
		{"job", group("", ""), func(t *testing.T, j *pb.Job) {
			want := &pb.Job{Id: "j", Name: "j", Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
				Update: &pb.UpdateStrategy{MaxParallel: 1}, SourceFile: "j.hcl"}
			got := proto.Clone(j).(*pb.Job)
			got.Groups = nil
			requireEqual(t, "job", got, want)
		}},
		{"service group", group(`type = "service"`, ""), func(t *testing.T, j *pb.Job) {
			g := j.GetGroups()[0]
			if g.GetCount() != 1 || g.GetUpdate() != nil {
				t.Errorf("count %d update %v, want 1 and none (the job's applies)", g.GetCount(), g.GetUpdate())
			}
			requireEqual(t, "restart", g.GetRestart(), &pb.RestartPolicy{Attempts: 2, IntervalMs: 1800000, DelayMs: 15000, Mode: pb.RestartMode_RESTART_MODE_FAIL})
			requireEqual(t, "reschedule", g.GetReschedule(), &pb.ReschedulePolicy{Unlimited: true, DelayMs: 30000, MaxDelayMs: 3600000})
		}},
		{"batch group", group(`type = "batch"`, ""), func(t *testing.T, j *pb.Job) {
			g := j.GetGroups()[0]
			requireEqual(t, "restart", g.GetRestart(), &pb.RestartPolicy{Attempts: 3, IntervalMs: 86400000, DelayMs: 15000, Mode: pb.RestartMode_RESTART_MODE_FAIL})
			requireEqual(t, "reschedule", g.GetReschedule(), &pb.ReschedulePolicy{Attempts: 1, IntervalMs: 86400000, DelayMs: 5000, MaxDelayMs: 5000})
		}},
		{"system group", group(`type = "system"`, ""), func(t *testing.T, j *pb.Job) {
			g := j.GetGroups()[0]
			if g.GetCount() != 1 || g.GetReschedule() != nil {
				t.Errorf("count %d reschedule %v, want 1 and none", g.GetCount(), g.GetReschedule())
			}
			requireEqual(t, "restart", g.GetRestart(), DefaultRestart(pb.JobType_JOB_TYPE_SERVICE))
		}},
		{"task", group("", ""), func(t *testing.T, j *pb.Job) {
			want := &pb.Task{Name: "t", Driver: "raw_exec", Config: sdk.ConfigMap{"command": sdk.StringValue("x")},
				Resources: &pb.TaskResources{CpuMhz: 100, MemoryMb: 300}, KillTimeoutMs: 5000, KillSignal: "SIGTERM",
				Logs: &driverpb.LogConfig{MaxFiles: 10, MaxFileSizeBytes: 10 << 20}}
			requireEqual(t, "task", j.GetGroups()[0].GetTasks()[0], want)
		}},
		{"partial restart keeps the other defaults", group(`type = "batch"`, `restart { attempts = 1 }`), func(t *testing.T, j *pb.Job) {
			requireEqual(t, "restart", j.GetGroups()[0].GetRestart(), &pb.RestartPolicy{Attempts: 1, IntervalMs: 86400000, DelayMs: 15000, Mode: pb.RestartMode_RESTART_MODE_FAIL})
		}},
		{"bounded reschedule is not unlimited", group("", `reschedule {
      attempts = 3
      interval = "1h"
    }`), func(t *testing.T, j *pb.Job) {
			requireEqual(t, "reschedule", j.GetGroups()[0].GetReschedule(), &pb.ReschedulePolicy{Attempts: 3, IntervalMs: 3600000, DelayMs: 30000, MaxDelayMs: 3600000})
		}},
		{"a long delay raises the default cap", group(`type = "batch"`, `reschedule { delay = "1m" }`), func(t *testing.T, j *pb.Job) {
			requireEqual(t, "reschedule", j.GetGroups()[0].GetReschedule(), &pb.ReschedulePolicy{Attempts: 1, IntervalMs: 86400000, DelayMs: 60000, MaxDelayMs: 60000})
		}},
		{"partial resources and logs", strings.Replace(group("", ""), `config { command = "x" }`,
			"config { command = \"x\" }\n      resources { memory = 64 }\n      logs { max_files = 2 }", 1), func(t *testing.T, j *pb.Job) {
			task := j.GetGroups()[0].GetTasks()[0]
			requireEqual(t, "resources", task.GetResources(), &pb.TaskResources{CpuMhz: 100, MemoryMb: 64})
			requireEqual(t, "logs", task.GetLogs(), &driverpb.LogConfig{MaxFiles: 2, MaxFileSizeBytes: 10 << 20})
		}},
		{"count 0 is kept", group("", "count = 0"), func(t *testing.T, j *pb.Job) {
			if c := j.GetGroups()[0].GetCount(); c != 0 {
				t.Errorf("count %d, want 0", c)
			}
		}},
		{"kill_timeout 0 is kept", strings.Replace(group("", ""), `driver = "raw_exec"`, "driver = \"raw_exec\"\n      kill_timeout = \"0s\"", 1), func(t *testing.T, j *pb.Job) {
			if ms := j.GetGroups()[0].GetTasks()[0].GetKillTimeoutMs(); ms != 0 {
				t.Errorf("kill_timeout_ms %d, want 0", ms)
			}
		}},
		{"distinct_hosts = false asks for nothing", group("constraint { distinct_hosts = false }", ""), func(t *testing.T, j *pb.Job) {
			if len(j.GetConstraints()) != 0 {
				t.Errorf("constraints %v, want none", j.GetConstraints())
			}
		}},
		{"operator defaults to =", group("constraint {\n attribute = \"${meta.a}\"\n value = \"b\"\n }", ""), func(t *testing.T, j *pb.Job) {
			requireEqual(t, "constraint", j.GetConstraints()[0], &pb.Constraint{Attribute: "${meta.a}", Operator: "=", Value: "b"})
		}},
		{"unquoted version value", group("constraint {\n attribute = \"${attr.x}\"\n operator = \"version\"\n value = 2\n }", ""), func(t *testing.T, j *pb.Job) {
			requireEqual(t, "constraint", j.GetConstraints()[0], &pb.Constraint{Attribute: "${attr.x}", Operator: "version", Value: "2"})
		}},
		{"name", group(`name = "My job"`, ""), func(t *testing.T, j *pb.Job) {
			if j.GetName() != "My job" || j.GetId() != "j" {
				t.Errorf("id %q name %q", j.GetId(), j.GetName())
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, mustParse(t, "j.hcl", tc.src))
		})
	}
}

// Interpolations are kept as written, wherever a string is, for the node
// to resolve; escapes and plain text around them are read as usual.
func TestInterpolationsAreKept(t *testing.T) {
	src := `job "j" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "${BERTH_TASK_DIR}/bin/run"
        args    = ["--node=${node.unique.name}", "${attr.unique.hostname}", "tab\there", "$${literal}"]
        opts    = { dir = "${BERTH_ALLOC_DIR}/data" }
      }
      env {
        WHO = <<EOT
${node.unique.name} in ${node.datacenter}
EOT
      }
    }
  }
}
`
	task := mustParse(t, "j.hcl", src).GetGroups()[0].GetTasks()[0]
	cfg := task.GetConfig()
	if got := cfg["command"].GetStringValue(); got != "${BERTH_TASK_DIR}/bin/run" {
		t.Errorf("command %q", got)
	}
	wantArgs := []string{"--node=${node.unique.name}", "${attr.unique.hostname}", "tab\there", "${literal}"}
	if got := cfg["args"].GetListValue().GetValues(); strings.Join(got, "|") != strings.Join(wantArgs, "|") {
		t.Errorf("args %q, want %q", got, wantArgs)
	}
	if got := cfg["opts"].GetMapValue().GetValues()["dir"]; got != "${BERTH_ALLOC_DIR}/data" {
		t.Errorf("opts.dir %q", got)
	}
	if got := task.GetEnv()["WHO"]; got != "${node.unique.name} in ${node.datacenter}\n" {
		t.Errorf("env WHO %q", got)
	}
}

// HCL 1's compact style, common in Nomad job files, is accepted, and errors
// in it point into the file as written.
func TestCompactStyle(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"  kill_signal = \"SIGINT\"\n" +
		"      config { command = \"x\"  args = [\"a\"] }\n      resources { cpu = 200  memory = 32 }\n    }\n  }\n}\n"
	task := mustParse(t, "j.hcl", src).GetGroups()[0].GetTasks()[0]
	if task.GetKillSignal() != "SIGINT" || task.GetResources().GetCpuMhz() != 200 || task.GetResources().GetMemoryMb() != 32 ||
		task.GetConfig()["args"].GetListValue().GetValues()[0] != "a" {
		t.Errorf("compact style misread: %s", prototext.Format(task))
	}
	bad := strings.Replace(src, "memory = 32", "memroy = 32", 1)
	_, err := Parse("j.hcl", []byte(bad))
	want := `j.hcl:6:30: group "g" task "t": resources.memroy: unknown key; did you mean "memory"?`
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got: %v\nwant: %s", err, want)
	}
}

func TestParseFileMissing(t *testing.T) {
	_, err := ParseFile(filepath.Join(t.TempDir(), "nope.hcl"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ParseFile of a missing file: %v, want a not-exist error", err)
	}
}
