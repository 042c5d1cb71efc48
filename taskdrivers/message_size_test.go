package taskdrivers

import (
	"strings"
	"testing"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// A task as large as the largest job the servers may be configured to
// accept (jobspec.MaxJobBytesCeiling) reaches a driver plugin subprocess
// and runs: the hop from client to driver carries what the hops before it
// took. With gRPC's default limits it was refused over 4 MiB.
func TestTaskAsLargeAsTheLargestJobReachesTheDriver(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(), nil)
	e.start(m)
	d := driver(t, m, "mock")
	big := strings.Repeat("x", jobspec.MaxJobBytesCeiling-4096)
	cfg := &driverpb.TaskConfig{Id: "big1", Name: "web", Env: map[string]string{"BIG": big},
		DriverConfig: sdk.ConfigMap{"run_for": sdk.StringValue("1ms"), "exit_code": sdk.IntValue(4)}}
	if _, err := d.StartTask(ctxT(t), cfg); err != nil {
		t.Fatalf("StartTask of a %d-byte task: %v", len(big), err)
	}
	if res, err := d.WaitTask(ctxT(t), "big1"); err != nil || res.GetExitCode() != 4 {
		t.Fatalf("WaitTask: %v, %v", res, err)
	}
}
