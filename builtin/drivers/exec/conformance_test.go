package execdriver_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	execdriver "berth.dev/berth/builtin/drivers/exec"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/drivertest"
)

func TestMain(m *testing.M) {
	drivertest.ServeIfPlugin(func(l hclog.Logger) sdk.Driver { return execdriver.New(l) })
	csiPluginIfRequested()
	os.Exit(m.Run())
}

func sh(script string) sdk.ConfigMap {
	return sdk.ConfigMap{"command": sdk.StringValue("/bin/sh"), "args": sdk.ListValue("-c", script)}
}

var enabled = sdk.ConfigMap{"enabled": sdk.BoolValue(true)}

// readyFile is where an exec task sees the harness's ready file: the
// harness puts it at the top of the task directory, which is the task's
// root.
const readyFile = `"/$(basename "$DRIVERTEST_READY_FILE")"`

// execCases are the harness behaviours as shell scripts run inside the
// task's root.
var execCases = drivertest.Cases{
	ExitCode:        func(code int) sdk.ConfigMap { return sh(fmt.Sprintf("exit %d", code)) },
	RunUntilStopped: func() sdk.ConfigMap { return sh(`touch ` + readyFile + `; exec sleep 1000`) },
	IgnoreStopSignal: func() sdk.ConfigMap {
		return sh(`trap "" TERM; touch ` + readyFile + `; exec sleep 1000`)
	},
	WithChild: func(token string) sdk.ConfigMap {
		return sh(`(trap "" TERM; exec sleep ` + token + `) & touch ` + readyFile + `; exec sleep 1000`)
	},
	ExitAfter: func(code int, d time.Duration) sdk.ConfigMap {
		return sh(fmt.Sprintf("sleep %.3f; exit %d", d.Seconds(), code))
	},
	BadConfigs: []drivertest.BadConfig{
		{Config: sdk.ConfigMap{}, Key: "command"},
		{Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/true"), "args": sdk.StringValue("-x")}, Key: "args"},
		{Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/true"), "cap_add": sdk.ListValue("CAP_NOPE")}, Key: "cap_add"},
	},
	MountsSeen: drivertest.MountsFromProc,
	ReadyFile:  true,
}

func TestConformance(t *testing.T) {
	testutil.RequireRoot(t, "exec isolates tasks with namespaces, mounts and cgroups")
	drivertest.Run(t, drivertest.Harness{PluginConfig: enabled, Cases: execCases})
}
