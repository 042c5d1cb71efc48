package apijson_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// A driver's task config is the plain JSON a user writes, both ways: each
// kind of value, with a duration written as Go writes it and read back as
// that string (which the driver's schema turns into a duration again).
func TestDriverConfigIsPlainJSON(t *testing.T) {
	task := &pb.Task{Name: "t", Config: map[string]*driverpb.ConfigValue{
		"command":    {Kind: &driverpb.ConfigValue_StringValue{StringValue: "sleep"}},
		"args":       {Kind: &driverpb.ConfigValue_ListValue{ListValue: &driverpb.StringList{Values: []string{"-c", "x"}}}},
		"port":       {Kind: &driverpb.ConfigValue_IntValue{IntValue: -9223372036854775808}},
		"privileged": {Kind: &driverpb.ConfigValue_BoolValue{BoolValue: false}},
		"labels":     {Kind: &driverpb.ConfigValue_MapValue{MapValue: &driverpb.StringMap{Values: map[string]string{"z": "1", "a": "é"}}}},
		"timeout":    {Kind: &driverpb.ConfigValue_DurationNanos{DurationNanos: int64(90 * time.Second)}},
		"none":       {},
		"empty_list": {Kind: &driverpb.ConfigValue_ListValue{ListValue: &driverpb.StringList{}}},
		"empty_map":  {Kind: &driverpb.ConfigValue_MapValue{MapValue: &driverpb.StringMap{}}},
	}}
	b, err := apijson.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	want := `"config": {
    "args": [
      "-c",
      "x"
    ],
    "command": "sleep",
    "empty_list": [],
    "empty_map": {},
    "labels": {
      "a": "é",
      "z": "1"
    },
    "none": null,
    "port": -9223372036854775808,
    "privileged": false,
    "timeout": "1m30s"
  },`
	if !strings.Contains(string(b), want) {
		t.Fatalf("config rendered as\n%s\nwant it to contain\n%s", b, want)
	}
	got := &pb.Task{}
	if err := apijson.Unmarshal(b, got); err != nil {
		t.Fatal(err)
	}
	// An empty value is written as null, and a null key reads back absent:
	// its default applies, as when a job file gives null.
	delete(task.Config, "none")
	task.Config["timeout"] = &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_StringValue{StringValue: "1m30s"}}
	if !proto.Equal(got, task) {
		t.Fatalf("read back\n%v\nwant\n%v", got, task)
	}
}

// A request body in the form Nomad's API and a job file take it; what a
// config value cannot be is refused naming its path.
func TestDriverConfigDecodesAsUsersWriteIt(t *testing.T) {
	req := &pb.JobRegisterRequest{}
	err := apijson.Unmarshal([]byte(`{"job": {"id": "web", "groups": [{"name": "g", "tasks": [{"name": "t", "driver": "raw_exec",
		"config": {"command": "/bin/sh", "args": ["-c", "sleep 1"], "port": 8080, "debug": true, "env": {"A": "b"}}}]}]}}`), req)
	if err != nil {
		t.Fatal(err)
	}
	cfg := req.GetJob().GetGroups()[0].GetTasks()[0].GetConfig()
	if cfg["command"].GetStringValue() != "/bin/sh" || strings.Join(cfg["args"].GetListValue().GetValues(), " ") != "-c sleep 1" ||
		cfg["port"].GetIntValue() != 8080 || !cfg["debug"].GetBoolValue() || cfg["env"].GetMapValue().GetValues()["A"] != "b" {
		t.Fatalf("config decoded as %v", cfg)
	}
	for in, want := range map[string]string{
		`{"config": {"args": ["-c", {}]}}`:          `config["args"][1]: expected a string (a driver config list holds strings; a number or boolean stands for its text), got an object`,
		`{"config": {"env": {"A": ["b"]}}}`:         `config["env"]["A"]: expected a string (a driver config map holds strings; a number or boolean stands for its text), got an array`,
		`{"config": {"args": [1e99999]}}`:           `config["args"][0]: number 1e99999 is out of range`,
		`{"config": {"env": {"A": "b", "A": "c"}}}`: `config["env"]["A"]: key given twice`,
		`{"config": {"cpu": 1.5}}`:                  `config["cpu"]: 1.5 is not a 64-bit integer (a driver config number is a whole number)`,
		`{"config": {"big": 1e30}}`:                 `config["big"]: 1e30 is not a 64-bit integer`,
		`{"config": {"args": [`:                     `config["args"][0]: unexpected end of JSON`,
		// The old rendering, the oneof with its unset members as null.
		`{"config": {"command": {"string_value": "sleep", "int_value": null}}}`: `config["command"]["int_value"]: expected a string (a driver config map holds strings; a number or boolean stands for its text), got null`,
		`{"config": {"a": null, "a": 1}}`:                                       `config["a"]: key given twice`,
	} {
		err := apijson.Unmarshal([]byte(in), &pb.Task{})
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Unmarshal(%s) = %v\nwant an error starting %q", in, err, want)
		}
	}
}
