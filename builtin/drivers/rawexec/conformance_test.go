package rawexec_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/builtin/drivers/rawexec"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/drivertest"
)

func TestMain(m *testing.M) {
	drivertest.ServeIfPlugin(func(l hclog.Logger) sdk.Driver { return rawexec.New(l) })
	os.Exit(m.Run())
}

func sh(script string) sdk.ConfigMap {
	return sdk.ConfigMap{"command": sdk.StringValue("/bin/sh"), "args": sdk.ListValue("-c", script)}
}

var enabled = sdk.ConfigMap{"enabled": sdk.BoolValue(true)}

// rawexecCases are the harness behaviours as shell scripts. The ready file
// is written only once the script's traps are in place.
var rawexecCases = drivertest.Cases{
	ExitCode:        func(code int) sdk.ConfigMap { return sh(fmt.Sprintf("exit %d", code)) },
	RunUntilStopped: func() sdk.ConfigMap { return sh(`touch "$DRIVERTEST_READY_FILE"; exec sleep 1000`) },
	IgnoreStopSignal: func() sdk.ConfigMap {
		return sh(`trap "" TERM; touch "$DRIVERTEST_READY_FILE"; exec sleep 1000`)
	},
	WithChild: func(token string) sdk.ConfigMap {
		return sh(`(trap "" TERM; exec sleep ` + token + `) & touch "$DRIVERTEST_READY_FILE"; exec sleep 1000`)
	},
	ExitAfter: func(code int, d time.Duration) sdk.ConfigMap {
		return sh(fmt.Sprintf("sleep %.3f; exit %d", d.Seconds(), code))
	},
	BadConfigs: []drivertest.BadConfig{
		{Config: sdk.ConfigMap{}, Key: "command"},
		{Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/true"), "args": sdk.StringValue("-x")}, Key: "args"},
	},
	ReadyFile: true,
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, drivertest.Harness{PluginConfig: enabled, Cases: rawexecCases})
}
