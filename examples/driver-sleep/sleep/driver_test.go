package sleep_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"

	"berth.dev/examples/driver-sleep/sleep"
)

// TestMain lets the harness run this test binary as the plugin.
func TestMain(m *testing.M) {
	drivertest.ServeIfPlugin(func(l hclog.Logger) sdk.Driver { return sleep.New(l) })
	os.Exit(m.Run())
}

var cases = drivertest.Cases{
	ExitCode: func(code int) sdk.ConfigMap {
		return sdk.ConfigMap{"duration": sdk.StringValue("0s"), "exit_code": sdk.IntValue(int64(code))}
	},
	RunUntilStopped: func() sdk.ConfigMap { return sdk.ConfigMap{"duration": sdk.StringValue("1h")} },
	ExitAfter: func(code int, d time.Duration) sdk.ConfigMap {
		return sdk.ConfigMap{"duration": sdk.DurationValue(d), "exit_code": sdk.IntValue(int64(code))}
	},
	BadConfigs: []drivertest.BadConfig{
		{Config: sdk.ConfigMap{}, Key: "duration"},
		{Config: sdk.ConfigMap{"duration": sdk.StringValue("2h")}, Key: "duration"}, // over max_duration
		{Config: sdk.ConfigMap{"duration": sdk.StringValue("1s"), "exit_code": sdk.BoolValue(true)}, Key: "exit_code"},
	},
}

var pluginConfig = sdk.ConfigMap{"max_duration": sdk.StringValue("90m")}

// TestConformance runs the harness against this test binary as the plugin.
func TestConformance(t *testing.T) {
	drivertest.Run(t, drivertest.Harness{PluginConfig: pluginConfig, Cases: cases})
}

// TestConformanceBuiltBinary runs the harness against the real plugin
// binary, built the way `make plugins` builds it.
func TestConformanceBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin binary")
	}
	bin := filepath.Join(t.TempDir(), "sleep")
	build := exec.Command("go", "build", "-o", bin, "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	drivertest.Run(t, drivertest.Harness{
		Command:      func() *exec.Cmd { return exec.Command(bin) },
		PluginConfig: pluginConfig,
		Cases:        cases,
	})
}

func TestOtherSignalsAreOnlyEvents(t *testing.T) {
	d := drivertest.InProcess(t, sleep.New(drivertest.Logger(t)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events := d.TaskEvents(ctx)
	if _, err := d.StartTask(ctx, &driverpb.TaskConfig{Id: "nap", DriverConfig: cases.RunUntilStopped()}); err != nil {
		t.Fatal(err)
	}
	if err := d.SignalTask(ctx, "nap", "SIGUSR2"); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for ev, err := range events {
		if err != nil {
			t.Fatal(err)
		}
		if msgs = append(msgs, ev.GetMessage()); len(msgs) == 2 {
			break
		}
	}
	if msgs[0] != "fell asleep" || msgs[1] != "received SIGUSR2" {
		t.Errorf("events %q", msgs)
	}
	if st, err := d.InspectTask(ctx, "nap"); err != nil || st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Errorf("after SIGUSR2: %v, %v; want still running", st, err)
	}
	if err := d.StopTask(ctx, "nap", 50*time.Millisecond, "SIGUSR2"); err != nil {
		t.Fatal(err)
	}
	res, err := d.WaitTask(ctx, "nap")
	if err != nil || res.GetSignal() != 9 {
		t.Errorf("stop with an ignored signal ends in %v, %v; want a kill after the timeout", res, err)
	}
	if err := d.SignalTask(ctx, "nap", "SIGTERM"); !errors.Is(err, sdk.ErrTaskNotRunning) {
		t.Errorf("signal after exit = %v", err)
	}
}
