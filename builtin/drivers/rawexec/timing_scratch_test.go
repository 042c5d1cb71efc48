package rawexec_test

import (
	"context"
	"testing"
	"time"

	"berth.dev/berth/builtin/drivers/rawexec"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
)

func TestScratchTiming(t *testing.T) {
	d := rawexec.New(drivertest.Logger(t))
	ctx := context.Background()
	d.SetConfig(ctx, &driverpb.PluginConfig{Values: enabled})
	dir := t.TempDir()
	for i, cfg := range []sdk.ConfigMap{sh("exit 3"), sh("exec sleep 1000")} {
		id := []string{"a", "b"}[i]
		t0 := time.Now()
		_, err := d.StartTask(ctx, &driverpb.TaskConfig{Id: id, Name: id, TaskDir: dir, DriverConfig: cfg})
		t.Log("start", time.Since(t0), err)
		if i == 0 {
			res, err := d.WaitTask(ctx, id)
			t.Log("wait", time.Since(t0), res, err)
		} else {
			t1 := time.Now()
			err := d.DestroyTask(ctx, id, true)
			t.Log("destroy", time.Since(t1), err)
		}
	}
}
