package mock_test

import (
	"context"
	"os"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/builtin/drivers/mock"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
)

func TestMain(m *testing.M) {
	drivertest.ServeIfPlugin(func(l hclog.Logger) sdk.Driver { return mock.New(l) })
	os.Exit(m.Run())
}

// mockCases are the harness's behaviours as mock task configs.
var mockCases = drivertest.Cases{
	ExitCode: func(code int) sdk.ConfigMap {
		return sdk.ConfigMap{"run_for": sdk.DurationValue(0), "exit_code": sdk.IntValue(int64(code))}
	},
	RunUntilStopped: func() sdk.ConfigMap { return sdk.ConfigMap{} },
	IgnoreStopSignal: func() sdk.ConfigMap {
		return sdk.ConfigMap{"ignore_stop_signal": sdk.BoolValue(true)}
	},
	ExitAfter: func(code int, d time.Duration) sdk.ConfigMap {
		return sdk.ConfigMap{"run_for": sdk.StringValue(d.String()), "exit_code": sdk.IntValue(int64(code))}
	},
	MountsSeen: func(ctx context.Context, d sdk.Driver, cfg *driverpb.TaskConfig) ([]*driverpb.Mount, error) {
		st, err := d.InspectTask(ctx, cfg.GetId())
		if err != nil {
			return nil, err
		}
		return mock.Mounts(st)
	},
	BadConfigs: []drivertest.BadConfig{
		{Config: sdk.ConfigMap{"run_for": sdk.StringValue("soon")}, Key: "run_for"},
		{Config: sdk.ConfigMap{"exit_code": sdk.StringValue("3")}, Key: "exit_code"},
		{Config: sdk.ConfigMap{"exit_signal": sdk.StringValue("SIGNOPE")}, Key: "exit_signal"},
	},
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, drivertest.Harness{Cases: mockCases})
}
