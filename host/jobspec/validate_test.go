package jobspec

import (
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/durations"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrSyntax:        codes.InvalidArgument,
		ErrUnknownKey:    codes.InvalidArgument,
		ErrWrongType:     codes.InvalidArgument,
		ErrInvalidJob:    codes.InvalidArgument,
		ErrUnknownDriver: codes.InvalidArgument,
		ErrJobLimit:      codes.InvalidArgument,
	})
}

// What Parse and ValidateJob return reaches the API as InvalidArgument,
// with every problem in the message.
func TestErrorsAreInvalidArgument(t *testing.T) {
	err := ValidateJob(&pb.Job{Id: "web"})
	if err == nil {
		t.Fatal("ValidateJob accepted a job without groups or type")
	}
	if c := errcode.Code(err); c != codes.InvalidArgument {
		t.Errorf("code %s, want InvalidArgument", c)
	}
	_, err = Parse("web.hcl", []byte("job {"))
	if c := errcode.Code(err); c != codes.InvalidArgument {
		t.Errorf("syntax error: code %s, want InvalidArgument", c)
	}
}

// minimalAPIJob is the least a client must send through the API: the rest
// is filled in by Canonicalize.
func minimalAPIJob() *pb.Job {
	return &pb.Job{Id: "web", Groups: []*pb.TaskGroup{{
		Name: "app", Count: 2,
		Tasks: []*pb.Task{{Name: "server", Driver: "raw_exec", KillTimeoutMs: 5000,
			Config: sdk.ConfigMap{"command": sdk.StringValue("sleep")}}},
	}}}
}

// A job registered as JSON through the API gets the same defaults as a
// parsed file (where proto3 can tell a field is unset) and passes the same
// checks.
func TestCanonicalizeMatchesParse(t *testing.T) {
	job := minimalAPIJob()
	Canonicalize(job)
	if err := ValidateJob(job); err != nil {
		t.Fatalf("canonicalized minimal job: %v", err)
	}
	parsed := mustParse(t, "web.hcl", `job "web" {
  group "app" {
    count = 2
    task "server" {
      driver = "raw_exec"
      config { command = "sleep" }
    }
  }
}
`)
	parsed.SourceFile = ""
	requireEqual(t, "canonicalized API job vs parsed file", job, parsed)
}

// Canonicalize changes nothing in a job Parse returned, so the server
// calling it again on what the CLI sends is harmless.
func TestCanonicalizeIsIdempotentOnParsedJobs(t *testing.T) {
	for _, f := range []string{"testdata/full.hcl", "../../examples/jobs/web.hcl", "../../examples/jobs/node-agent.hcl"} {
		job, err := ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		again := proto.Clone(job).(*pb.Job)
		Canonicalize(again)
		requireEqual(t, f, again, job)
	}
}

func TestCanonicalizeSystemAndBatch(t *testing.T) {
	sys := minimalAPIJob()
	sys.Type = pb.JobType_JOB_TYPE_SYSTEM
	sys.Groups[0].Count = 0
	Canonicalize(sys)
	if g := sys.Groups[0]; g.Count != 1 || g.Reschedule != nil {
		t.Errorf("system group: count %d reschedule %v, want 1 and none", g.Count, g.Reschedule)
	}
	batch := minimalAPIJob()
	batch.Type = pb.JobType_JOB_TYPE_BATCH
	batch.Groups[0].Restart = &pb.RestartPolicy{Attempts: 1, IntervalMs: 60000}
	Canonicalize(batch)
	requireEqual(t, "batch reschedule", batch.Groups[0].Reschedule, DefaultReschedule(pb.JobType_JOB_TYPE_BATCH))
	if m := batch.Groups[0].Restart.Mode; m != pb.RestartMode_RESTART_MODE_FAIL {
		t.Errorf("restart mode %v, want fail", m)
	}
}

// ValidateJob, for jobs from the API, names field paths without positions.
func TestValidateJobFromAPI(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(j *pb.Job)
		want   string
	}{
		{"negative count", func(j *pb.Job) { j.Groups[0].Count = -1 }, `group "app": count: must be >= 0, got -1`},
		{"unknown type", func(j *pb.Job) { j.Type = 42 }, `type: must be "service", "batch" or "system"`},
		{"no groups", func(j *pb.Job) { j.Groups = nil }, `group: a job needs at least one group`},
		{"no tasks", func(j *pb.Job) { j.Groups[0].Tasks = nil }, `group "app": no task: a group needs at least one task`},
		{"duplicate group", func(j *pb.Job) { j.Groups = append(j.Groups, proto.Clone(j.Groups[0]).(*pb.TaskGroup)) },
			`group "app": duplicate group name`},
		{"duplicate task", func(j *pb.Job) {
			j.Groups[0].Tasks = append(j.Groups[0].Tasks, proto.Clone(j.Groups[0].Tasks[0]).(*pb.Task))
		},
			`group "app" task "server": duplicate task name`},
		{"name with NUL", func(j *pb.Job) { j.Groups[0].Tasks[0].Name = "a\x00b" },
			`group "app" task "a\x00b": task name "a\x00b" may hold only letters, digits, '_', '-' and '.'`},
		{"operator ==", func(j *pb.Job) {
			j.Constraints = []*pb.Constraint{{Attribute: "${attr.a}", Operator: "==", Value: "b"}}
		}, ""},
		{"empty operator", func(j *pb.Job) { j.Constraints = []*pb.Constraint{{Attribute: "${attr.a}", Value: "b"}} },
			`constraint[0].operator: unknown operator ""` + ` (one of "=", "==", "!=", "regexp", "version", "is_set", "is_not_set", "distinct_hosts")`},
		{"regexp without value", func(j *pb.Job) {
			j.Groups[0].Constraints = []*pb.Constraint{{Attribute: "${attr.a}", Operator: "regexp"}}
		}, `group "app": constraint[0].value: required for operator "regexp"`},
		{"lifecycle without hook", func(j *pb.Job) { j.Groups[0].Tasks[0].Lifecycle = &pb.Lifecycle{} },
			`group "app" task "server": lifecycle.hook: must be "prestart", "poststart" or "poststop"`},
		{"restart mode unspecified", func(j *pb.Job) { j.Groups[0].Restart.Mode = 0 },
			`group "app": restart.mode: must be "fail" or "delay"`},
		{"negative kill timeout", func(j *pb.Job) { j.Groups[0].Tasks[0].KillTimeoutMs = -1 },
			`group "app" task "server": kill_timeout: must not be negative, got -1ms`},
		{"volume key mismatch", func(j *pb.Job) {
			j.Groups[0].Volumes = map[string]*pb.VolumeRequest{"data": {Name: "other", Type: "csi", Source: "v"}}
		}, `group "app" volume "data": name: "other" differs from the volume's key "data"`},
		{"one volume named twice", func(j *pb.Job) {
			j.Groups[0].Volumes = map[string]*pb.VolumeRequest{
				"a": {Name: "a", Type: "csi", Source: "v"},
				"b": {Name: "b", Type: "csi", Source: "v", ReadOnly: true},
			}
		}, `group "app" volume "b": source: "v" is the volume group volume "a" claims already; ` +
			`an alloc holds one claim per volume: declare it once and mount it twice with volume_mount`},
		{"two per_alloc volumes of one source", func(j *pb.Job) {
			j.Groups[0].Volumes = map[string]*pb.VolumeRequest{
				"a": {Name: "a", Type: "csi", Source: "v", PerAlloc: true},
				"b": {Name: "b", Type: "csi", Source: "v", PerAlloc: true},
			}
		}, `group "app" volume "b": source: per_alloc source "v" is the one group volume "a" claims already; ` +
			`an alloc holds one claim per volume: declare it once and mount it twice with volume_mount`},
		{"per_alloc after the indexed volume it resolves to", func(j *pb.Job) {
			j.Groups[0].Volumes = map[string]*pb.VolumeRequest{
				"a": {Name: "a", Type: "csi", Source: "v[12]"},
				"b": {Name: "b", Type: "csi", Source: "v", PerAlloc: true},
			}
		}, `group "app" volume "b": source: per_alloc source "v" resolves, for the alloc of index 12, to "v[12]", the volume ` +
			`group volume "a" claims already; an alloc holds one claim per volume: declare it once and mount it twice with volume_mount`},
		{"volumes that never meet", func(j *pb.Job) {
			j.Groups[0].Volumes = map[string]*pb.VolumeRequest{
				"a": {Name: "a", Type: "csi", Source: "v", PerAlloc: true},
				"b": {Name: "b", Type: "csi", Source: "v"},
				"c": {Name: "c", Type: "csi", Source: "v[0]", PerAlloc: true},
				"d": {Name: "d", Type: "csi", Source: "v[01]"},
				"e": {Name: "e", Type: "csi", Source: "w[0]"},
			}
		}, ""},
		{"nil task", func(j *pb.Job) { j.Groups[0].Tasks = append(j.Groups[0].Tasks, nil) }, `group "app": tasks[1]: empty task`},
		{"priority", func(j *pb.Job) { j.Priority = 101 }, `priority: must be between 1 and 100, got 101`},
		{"env name", func(j *pb.Job) { j.Groups[0].Tasks[0].Env = map[string]string{"A=B": "x"} },
			`group "app" task "server": env: invalid variable name "A=B"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := minimalAPIJob()
			Canonicalize(job)
			tc.change(job)
			err := ValidateJob(job)
			if tc.want == "" {
				if err != nil {
					t.Errorf("ValidateJob: %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("ValidateJob:\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
	if err := ValidateJob(nil); err == nil || err.Error() != "no job" {
		t.Errorf("ValidateJob(nil) = %v", err)
	}
}

// The server re-validates what arrives as JSON: a parsed job, encoded by
// the one codec and decoded again, is the same job and still valid.
func TestParsedJobSurvivesAPIJSON(t *testing.T) {
	job, err := ParseFile("testdata/full.hcl")
	if err != nil {
		t.Fatal(err)
	}
	b, err := apijson.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	back := &pb.Job{}
	if err := apijson.Unmarshal(b, back); err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "after apijson", back, job)
	Canonicalize(back)
	if err := ValidateJob(back); err != nil {
		t.Errorf("ValidateJob after apijson: %v", err)
	}
}

func TestValidateDrivers(t *testing.T) {
	schemas := map[string]*driverpb.Schema{
		"raw_exec": rawExecSchema,
		"sleepy": {Fields: []*driverpb.Field{
			{Name: "duration", Type: sdk.TypeDuration, Required: true},
			{Name: "labels", Type: sdk.TypeMap},
			{Name: "verbose", Type: sdk.TypeBool},
		}},
	}
	for _, tc := range []struct {
		name    string
		driver  string
		config  sdk.ConfigMap
		schemas map[string]*driverpb.Schema
		want    string
		kind    error
	}{
		{name: "valid", driver: "raw_exec", config: sdk.ConfigMap{"command": sdk.StringValue("sleep"), "args": sdk.ListValue("1")}},
		{name: "duration as a string", driver: "sleepy", config: sdk.ConfigMap{"duration": sdk.StringValue("30s")}},
		{name: "bad duration", driver: "sleepy", config: sdk.ConfigMap{"duration": sdk.StringValue("soon")},
			want: `group "app" task "server": config.duration: invalid duration "soon" (use a number with a unit, e.g. "30s", "5m")`, kind: ErrWrongType},
		{name: "wrong type", driver: "sleepy", config: sdk.ConfigMap{"duration": sdk.IntValue(5), "verbose": sdk.StringValue("yes")},
			want: `group "app" task "server": config.duration: expected a duration, got an int` + "\n" +
				`group "app" task "server": config.verbose: expected a bool, got a string`, kind: ErrWrongType},
		{name: "missing required", driver: "sleepy", config: sdk.ConfigMap{"labels": sdk.MapValue(map[string]string{"a": "b"})},
			want: `group "app" task "server": config.duration: required key is missing`, kind: ErrInvalidJob},
		{name: "unknown key", driver: "raw_exec", config: sdk.ConfigMap{"command": sdk.StringValue("x"), "image": sdk.StringValue("y")},
			want: `group "app" task "server": config.image: driver "raw_exec" has no config key "image" (valid keys: args, command, cwd)`, kind: ErrUnknownKey},
		{name: "unknown driver", driver: "rawexec",
			want: `group "app" task "server": driver: no driver "rawexec" in the cluster; did you mean "raw_exec"?`, kind: ErrUnknownDriver},
		{name: "known driver without a schema", driver: "legacy", config: sdk.ConfigMap{"anything": sdk.IntValue(1)},
			schemas: map[string]*driverpb.Schema{"legacy": nil}},
		{name: "no drivers at all", driver: "raw_exec", schemas: map[string]*driverpb.Schema{},
			want: `group "app" task "server": driver: no driver "raw_exec" in the cluster (it has none)`, kind: ErrUnknownDriver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := minimalAPIJob()
			job.Groups[0].Tasks[0].Driver = tc.driver
			job.Groups[0].Tasks[0].Config = tc.config
			s := schemas
			if tc.schemas != nil {
				s = tc.schemas
			}
			err := ValidateDrivers(job, s)
			if tc.want == "" {
				if err != nil {
					t.Errorf("ValidateDrivers: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("ValidateDrivers:\n got: %v\nwant: %s", err, tc.want)
			}
			var es *Errors
			errors.As(err, &es)
			for _, e := range es.Errs {
				if !errors.Is(e, tc.kind) {
					t.Errorf("%v: kind %v, want %v", e, e.Kind, tc.kind)
				}
			}
		})
	}
}

// A csi_plugin block that leaves out its directories and health timeout
// gets Nomad's defaults, from a file and through the API alike.
func TestCSIPluginDefaults(t *testing.T) {
	want := &pb.CSIPluginConfig{Id: "hostpath", Type: "monolith", MountDir: "/csi",
		StagePublishBaseDir: "/local/csi", HealthTimeoutMs: 30_000}
	parsed := mustParse(t, "p.hcl", `job "p" {
  group "g" {
    task "plugin" {
      driver = "raw_exec"
      config { command = "sleep" }
      csi_plugin {
        id   = "hostpath"
        type = "monolith"
      }
    }
  }
}
`)
	requireEqual(t, "parsed csi_plugin", parsed.GetGroups()[0].GetTasks()[0].GetCsiPlugin(), want)

	api := minimalAPIJob()
	api.Groups[0].Tasks[0].CsiPlugin = &pb.CSIPluginConfig{Id: "hostpath", Type: "monolith"}
	Canonicalize(api)
	requireEqual(t, "canonicalized csi_plugin", api.GetGroups()[0].GetTasks()[0].GetCsiPlugin(), want)
	if err := ValidateJob(api); err != nil {
		t.Fatalf("canonicalized plugin job: %v", err)
	}
	// What a job sets is kept.
	set := &pb.CSIPluginConfig{Id: "x", Type: "node", MountDir: "/plugin", StagePublishBaseDir: "/mnt", HealthTimeoutMs: 5}
	api.Groups[0].Tasks[0].CsiPlugin = proto.Clone(set).(*pb.CSIPluginConfig)
	Canonicalize(api)
	requireEqual(t, "csi_plugin with every field set", api.GetGroups()[0].GetTasks()[0].GetCsiPlugin(), set)
}

// A job sent as JSON through the API meets the same volume_mount rule as a
// file: here a destination with a NUL byte, which no driver can mount.
func TestVolumeMountDestinationWithNULIsRefused(t *testing.T) {
	job := minimalAPIJob()
	g := job.GetGroups()[0]
	g.Volumes = map[string]*pb.VolumeRequest{"data": {Name: "data", Type: "csi", Source: "v1",
		AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
	g.Tasks[0].VolumeMounts = []*pb.VolumeMount{{Volume: "data", Destination: "/srv\x00/data"}}
	Canonicalize(job)
	err := ValidateJob(job)
	if err == nil || !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), `volume_mount[0].destination: must not contain a NUL byte`) {
		t.Fatalf("ValidateJob = %v, want the NUL byte in volume_mount[0].destination refused", err)
	}
}

// A destination the drivers mount ("/data/" common in Nomad jobs) is
// accepted and given to them clean; two that clean to the same path are
// one mount twice, refused.
func TestVolumeMountDestinationsDriversMount(t *testing.T) {
	for d, clean := range map[string]string{"/data/": "/data", "/data/./x": "/data/x", "//data": "/data", "/data//x": "/data/x"} {
		job := minimalAPIJob()
		g := job.GetGroups()[0]
		g.Volumes = map[string]*pb.VolumeRequest{"data": {Name: "data", Type: "csi", Source: "v1",
			AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
		g.Tasks[0].VolumeMounts = []*pb.VolumeMount{{Volume: "data", Destination: d}}
		Canonicalize(job)
		if err := ValidateJob(job); err != nil {
			t.Errorf("destination %q, which the drivers mount, is refused: %v", d, err)
		}
		if got := g.Tasks[0].VolumeMounts[0].GetDestination(); got != clean {
			t.Errorf("destination %q canonicalized to %q, want %q", d, got, clean)
		}
	}

	job := minimalAPIJob()
	g := job.GetGroups()[0]
	g.Volumes = map[string]*pb.VolumeRequest{"data": {Name: "data", Type: "csi", Source: "v1",
		AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
	g.Tasks[0].VolumeMounts = []*pb.VolumeMount{{Volume: "data", Destination: "/srv/data"}, {Volume: "data", Destination: "/srv//data/"}}
	err := ValidateJob(job) // not canonicalized: the rule compares clean paths itself
	if err == nil || !strings.Contains(err.Error(), `volume_mount[1].destination: "/srv/data" is also the task path of volume_mount[0]`) {
		t.Fatalf("ValidateJob = %v, want /srv//data/ refused as the path of volume_mount[0]", err)
	}
}

// Every duration of a job is held to durations.MaxMs: a larger one would
// overflow into a negative duration where it is added to a time (a restart
// delay of 2^63-1 ms restarted at once). The refusal names the field and
// the maximum.
func TestDurationsAreBounded(t *testing.T) {
	const huge = math.MaxInt64
	for field, set := range map[string]func(j *pb.Job){
		"restart.interval":        func(j *pb.Job) { j.Groups[0].Restart.IntervalMs = huge },
		"restart.delay":           func(j *pb.Job) { j.Groups[0].Restart.DelayMs = huge },
		"reschedule.interval":     func(j *pb.Job) { j.Groups[0].Reschedule.IntervalMs = huge },
		"reschedule.delay":        func(j *pb.Job) { j.Groups[0].Reschedule.DelayMs = huge },
		"reschedule.max_delay":    func(j *pb.Job) { j.Groups[0].Reschedule.MaxDelayMs = huge },
		"update.min_healthy_time": func(j *pb.Job) { j.Update.MinHealthyMs = huge },
		"kill_timeout":            func(j *pb.Job) { j.Groups[0].Tasks[0].KillTimeoutMs = huge },
		"csi_plugin.health_timeout": func(j *pb.Job) {
			j.Groups[0].Tasks[0].CsiPlugin = &pb.CSIPluginConfig{Id: "p", Type: "controller", HealthTimeoutMs: huge}
		},
	} {
		job := minimalAPIJob()
		Canonicalize(job)
		set(job)
		Canonicalize(job)
		err := ValidateJob(job)
		want := field + ": must be at most " + durations.Max.String() + ", got 9223372036854775807ms"
		if err == nil || !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s at 2^63-1 ms: %v\nwant an error containing %q", field, err, want)
		}
	}
	job := minimalAPIJob()
	Canonicalize(job)
	job.Groups[0].Tasks[0].KillTimeoutMs = durations.MaxMs
	if err := ValidateJob(job); err != nil {
		t.Errorf("kill_timeout at the maximum: %v", err)
	}
}
