package mock

import (
	"context"
	"errors"
	"testing"
	"time"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// FuzzRecoverTask feeds RecoverTask persisted driver states: it recovers
// the task or refuses with ErrInvalidHandle, and never panics.
func FuzzRecoverTask(f *testing.F) {
	f.Add([]byte(`{"started_at":1700000000000000000}`), int64(0))
	f.Add([]byte(`{"started_at":-1}`), int64(5))
	f.Add([]byte(`{`), int64(0))
	f.Add([]byte(`null`), int64(-9))
	f.Fuzz(func(t *testing.T, state []byte, runFor int64) {
		d := New(nil)
		cfg := &driverpb.TaskConfig{Id: "t1", DriverConfig: sdk.ConfigMap{"run_for": sdk.DurationValue(time.Duration(runFor))}}
		err := d.RecoverTask(context.Background(), &driverpb.TaskHandle{Version: handleVersion, Driver: Name, Config: cfg, DriverState: state})
		if err != nil && !errors.Is(err, sdk.ErrInvalidHandle) {
			t.Fatalf("RecoverTask = %v, want nil or ErrInvalidHandle", err)
		}
		d.DestroyTask(context.Background(), "t1", true)
	})
}
