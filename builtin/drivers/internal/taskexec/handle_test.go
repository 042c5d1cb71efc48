package taskexec

import (
	"errors"
	"testing"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

const testName = "raw_exec"

var testCore = New(testName, ".rawexec", nil, nil)

// FuzzDecodeHandle feeds decodeHandle driver states a client may have
// persisted (or corrupted): it accepts only states that point at the task's
// own state directory, and rejects the rest with ErrInvalidHandle.
func FuzzDecodeHandle(f *testing.F) {
	cfg := &driverpb.TaskConfig{Id: "t1", TaskDir: "/data/alloc/a/web"}
	f.Add([]byte(`{"executor":{"executor":{"pid":10,"start_ticks":5},"task":{"pid":11,"start_ticks":6},"state_dir":"/data/alloc/a/web/.rawexec/t1"}}`))
	f.Add([]byte(`{"executor":{"executor":{"pid":10},"task":{"pid":11},"state_dir":"/etc"}}`))
	f.Add([]byte(`{"executor":{"executor":{"pid":-1},"task":{"pid":0},"state_dir":"/data/alloc/a/web/.rawexec/t1"}}`))
	f.Add([]byte(`not json`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, state []byte) {
		h := &driverpb.TaskHandle{Version: handleVersion, Driver: testName, Config: cfg, DriverState: state}
		st, err := testCore.decodeHandle(h)
		if err != nil {
			if !errors.Is(err, sdk.ErrInvalidHandle) {
				t.Fatalf("error %v is not ErrInvalidHandle", err)
			}
			return
		}
		if st.Executor.StateDir != testCore.StateDir(cfg) || st.Executor.Executor.Pid <= 0 || st.Executor.Task.Pid <= 0 {
			t.Fatalf("accepted state %+v", st)
		}
	})
}

func TestDecodeHandleRejectsForeignHandles(t *testing.T) {
	good := &driverpb.TaskHandle{Version: handleVersion, Driver: testName,
		Config:      &driverpb.TaskConfig{Id: "t1", TaskDir: "/d"},
		DriverState: []byte(`{"executor":{"executor":{"pid":10},"task":{"pid":11},"state_dir":"/d/.rawexec/t1"}}`)}
	if _, err := testCore.decodeHandle(good); err != nil {
		t.Fatalf("good handle: %v", err)
	}
	for name, mutate := range map[string]func(h *driverpb.TaskHandle){
		"other driver":  func(h *driverpb.TaskHandle) { h.Driver = "mock" },
		"newer version": func(h *driverpb.TaskHandle) { h.Version = handleVersion + 1 },
		"no task dir":   func(h *driverpb.TaskHandle) { h.Config = &driverpb.TaskConfig{Id: "t1"} },
		"bad id":        func(h *driverpb.TaskHandle) { h.Config = &driverpb.TaskConfig{Id: "../t1", TaskDir: "/d"} },
	} {
		h := &driverpb.TaskHandle{Version: good.Version, Driver: good.Driver, Config: good.Config, DriverState: good.DriverState}
		mutate(h)
		if _, err := testCore.decodeHandle(h); !errors.Is(err, sdk.ErrInvalidHandle) {
			t.Errorf("%s: %v, want ErrInvalidHandle", name, err)
		}
	}
}
