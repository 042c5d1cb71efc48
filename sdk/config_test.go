package sdk

import (
	"errors"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sdk/driverpb"
)

var testSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "command", Type: TypeString, Required: true},
	{Name: "count", Type: TypeInt, Default: IntValue(2)},
	{Name: "verbose", Type: TypeBool},
	{Name: "timeout", Type: TypeDuration, Default: DurationValue(5 * time.Second)},
	{Name: "args", Type: TypeList},
	{Name: "labels", Type: TypeMap},
}}

var testSpec = ConfigSpec{Plugin: "demo", Scope: ScopeTaskConfig, Schema: testSchema}

func TestValidateAppliesDefaultsAndCoercesDurations(t *testing.T) {
	vals, err := testSpec.Validate(ConfigMap{
		"command": StringValue("/bin/echo"),
		"timeout": StringValue("1m30s"),
		"args":    ListValue("a", "b"),
		"labels":  MapValue(map[string]string{"k": "v"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if vals.String("command") != "/bin/echo" || vals.Int("count") != 2 || vals.Duration("timeout") != 90*time.Second {
		t.Errorf("values: command %q count %d timeout %s", vals.String("command"), vals.Int("count"), vals.Duration("timeout"))
	}
	if got := vals.List("args"); len(got) != 2 || got[1] != "b" {
		t.Errorf("args %v", got)
	}
	if vals.Map("labels")["k"] != "v" {
		t.Errorf("labels %v", vals.Map("labels"))
	}
	if vals.Has("verbose") || vals.Bool("verbose") {
		t.Error("optional key without default must stay absent")
	}
	if !vals.Has("count") {
		t.Error("defaulted key must be present")
	}
	// The normalized map carries the duration as a duration.
	if vals.ConfigMap()["timeout"].GetDurationNanos() != int64(90*time.Second) {
		t.Errorf("normalized timeout %v", vals.ConfigMap()["timeout"])
	}
	// Getters hand out copies.
	vals.List("args")[0] = "changed"
	if vals.List("args")[0] != "a" {
		t.Error("List returned the internal slice")
	}
}

func TestValidateReportsEveryProblemByKey(t *testing.T) {
	_, err := testSpec.Validate(ConfigMap{
		"count":   StringValue("three"),
		"timeout": StringValue("soon"),
		"colour":  StringValue("red"),
		"verbose": nil,
	})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	got := configErrors(err)
	want := []struct{ key, problem string }{
		{"colour", "unknown key (valid keys: args, command, count, labels, timeout, verbose)"},
		{"command", "required key is missing"},
		{"count", "expected an int, got a string"},
		{"timeout", `invalid duration "soon"`},
		{"verbose", "expected a bool, got an empty value"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors (%v), want %d", len(got), err, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Key != w.key || !strings.HasPrefix(g.Problem, w.problem) || g.Plugin != "demo" || g.Scope != ScopeTaskConfig {
			t.Errorf("error %d = %+v, want key %q problem %q", i, g, w.key, w.problem)
		}
	}
	if msg := got[0].Error(); msg != `demo task config: key "colour": unknown key (valid keys: args, command, count, labels, timeout, verbose)` {
		t.Errorf("message %q", msg)
	}
}

func TestCheckSchema(t *testing.T) {
	cases := []struct {
		name   string
		fields []*driverpb.Field
		want   string
	}{
		{"ok", testSchema.GetFields(), ""},
		{"bad name", []*driverpb.Field{{Name: "Bad-Name", Type: TypeString}}, "must match"},
		{"duplicate", []*driverpb.Field{{Name: "a", Type: TypeString}, {Name: "a", Type: TypeInt}}, "declared twice"},
		{"no type", []*driverpb.Field{{Name: "a"}}, "unknown type"},
		{"required default", []*driverpb.Field{{Name: "a", Type: TypeString, Required: true, Default: StringValue("x")}}, "cannot have a default"},
		{"default type", []*driverpb.Field{{Name: "a", Type: TypeDuration, Default: StringValue("5s")}}, "default is a string, field is a duration"},
	}
	for _, c := range cases {
		err := CheckSchema(&driverpb.Schema{Fields: c.fields})
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: CheckSchema = %v, want %q", c.name, err, c.want)
		}
	}
}

func TestParseConfigJSON(t *testing.T) {
	m, err := ParseConfigJSON([]byte(`{"command":"/bin/sh","count":3,"verbose":true,"args":["-c","x"],"labels":{"a":"b"},"timeout":"10s"}`))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := testSpec.Validate(m)
	if err != nil {
		t.Fatal(err)
	}
	if vals.Int("count") != 3 || !vals.Bool("verbose") || vals.Duration("timeout") != 10*time.Second || vals.List("args")[1] != "x" || vals.Map("labels")["a"] != "b" {
		t.Errorf("decoded %v", vals.ConfigMap())
	}
	for _, bad := range []string{`[]`, `null`, `{"a":1.5}`, `{"a":[1]}`, `{"a":{"b":2}}`, `{"a":null}`, `{} {}`, `{"a":1e30}`} {
		if _, err := ParseConfigJSON([]byte(bad)); !errors.Is(err, ErrConfigJSON) {
			t.Errorf("ParseConfigJSON(%s) = %v, want ErrConfigJSON", bad, err)
		}
	}
}

func FuzzParseConfigJSON(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":"b"}`, `{"n":-9223372036854775808}`, `{"l":["x",""]}`, `{"m":{"":""}}`, `{"b":false}`, `[`, `{"a":1.0}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseConfigJSON(data)
		if err != nil {
			if !errors.Is(err, ErrConfigJSON) {
				t.Fatalf("error %v does not wrap ErrConfigJSON", err)
			}
			return
		}
		for k, v := range m {
			if v.GetKind() == nil {
				t.Fatalf("key %q decoded to an empty value", k)
			}
		}
		// Whatever decodes must validate or fail with config errors, not panic.
		if _, err := testSpec.Validate(m); err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("Validate: %v", err)
		}
	})
}

func TestValidateTaskConfig(t *testing.T) {
	ok := &driverpb.TaskConfig{Id: "alloc-1.web_0", TaskDir: "/data/alloc/1/web"}
	if err := ValidateTaskConfig("demo", ok); err != nil {
		t.Errorf("valid config: %v", err)
	}
	bad := &driverpb.TaskConfig{Id: "..", TaskDir: "rel/dir", LogDir: "logs"}
	errs := configErrors(ValidateTaskConfig("demo", bad))
	if len(errs) != 3 || errs[0].Key != "id" || errs[1].Key != "task_dir" || errs[2].Key != "log_dir" || errs[0].Scope != ScopeTask {
		t.Errorf("errors %v, want id, task_dir, log_dir in scope task", errs)
	}
	for _, id := range []string{"", ".", "a/b", strings.Repeat("x", 129), "tab\t"} {
		if ValidTaskID(id) {
			t.Errorf("ValidTaskID(%q) = true", id)
		}
	}
}
