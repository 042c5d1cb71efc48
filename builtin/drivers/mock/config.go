package mock

import (
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// Name is the driver's name in job specs.
const Name = "mock"

var pluginSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "unhealthy_after", Type: sdk.TypeDuration, Description: "turn unhealthy this long after the config is set"},
	{Name: "attributes", Type: sdk.TypeMap, Description: "extra fingerprint attributes"},
}}

var taskSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "run_for", Type: sdk.TypeDuration, Description: "exit after this long; absent: run until stopped"},
	{Name: "exit_code", Type: sdk.TypeInt, Default: sdk.IntValue(0), Description: "exit code when run_for elapses"},
	{Name: "exit_signal", Type: sdk.TypeString, Description: "report the task as killed by this signal"},
	{Name: "exit_error", Type: sdk.TypeString, Description: "error reported with the exit"},
	{Name: "start_error", Type: sdk.TypeString, Description: "StartTask fails with this message"},
	{Name: "start_block_for", Type: sdk.TypeDuration, Description: "StartTask blocks this long"},
	{Name: "ignore_stop_signal", Type: sdk.TypeBool, Default: sdk.BoolValue(false), Description: "only a kill ends the task"},
	{Name: "crash_plugin_after", Type: sdk.TypeDuration, Description: "crash the plugin process this long after start"},
	{Name: "driver_unhealthy_after", Type: sdk.TypeDuration, Description: "turn the driver unhealthy this long after start"},
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
