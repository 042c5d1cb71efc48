package rawexec

import (
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// Name is the driver's name in job specs.
const Name = "raw_exec"

var pluginSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "enabled", Type: sdk.TypeBool, Default: sdk.BoolValue(false),
		Description: "allow raw_exec tasks; they run unisolated, as the agent's user"},
}}

var taskSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "command", Type: sdk.TypeString, Required: true, Description: "program to run; looked up in PATH when it has no slash"},
	{Name: "args", Type: sdk.TypeList, Description: "arguments"},
	{Name: "cwd", Type: sdk.TypeString, Description: "working directory, relative to the task directory"},
}}

func taskSpec() sdk.ConfigSpec {
	return sdk.ConfigSpec{Plugin: Name, Scope: sdk.ScopeTaskConfig, Schema: taskSchema}
}

func pluginSpec() sdk.ConfigSpec {
	return sdk.ConfigSpec{Plugin: Name, Scope: sdk.ScopePlugin, Schema: pluginSchema}
}

// TaskSchema is the schema of this driver's task config, for tools that
// check a job without starting the driver (the CLI's job validate).
func TaskSchema() *driverpb.Schema { return taskSchema }
