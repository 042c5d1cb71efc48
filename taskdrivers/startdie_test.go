package taskdrivers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// dyingStarter (fake "startdie") dies inside StartTask, as a plugin
// killed after it started a container but before it answered; it records
// its StartTask and DestroyTask calls in fakeCallsEnv's file.
type dyingStarter struct{ renamed }

func recordCall(format string, args ...any) {
	path := os.Getenv(fakeCallsEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, _ = fmt.Fprintf(f, format+"\n", args...)
		_ = f.Close()
	}
}

func (dyingStarter) StartTask(_ context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	recordCall("StartTask %s", cfg.GetId())
	os.Exit(3)
	return nil, nil
}

func (dyingStarter) DestroyTask(_ context.Context, id string, force bool) error {
	recordCall("DestroyTask %s %v", id, force)
	return fmt.Errorf("destroy %q: %w", id, sdk.ErrTaskNotFound)
}

// A plugin that dies inside StartTask may have started the task (a
// container outlives its plugin), and no handle names it and no later
// start reuses its ID: the manager destroys the ID on the next plugin
// before the failed start returns.
func TestPluginDyingInStartTaskHasTheTaskDestroyedOnTheNextPlugin(t *testing.T) {
	e := newEnv(t)
	calls := filepath.Join(t.TempDir(), "calls")
	e.script("dies", fmt.Sprintf("%s=%q %s=startdie %s=dies exec %q", fakeCallsEnv, calls, fakeEnv, fakeNameEnv, testExecutable(t)), 0o755)
	m := e.newManager(e.catalog(), nil)
	e.start(m)
	d := driver(t, m, "dies")
	_, err := d.StartTask(ctxT(t), &driverpb.TaskConfig{Id: "d1", Name: "web", DriverConfig: sdk.ConfigMap{"run_for": sdk.StringValue("1h")}})
	wantErr(t, err, sdk.ErrPluginShutdown)
	if got, want := fakeCalls(t, calls), []string{"StartTask d1", "DestroyTask d1 true"}; !slices.Equal(got, want) {
		t.Fatalf("calls the plugins saw by the time StartTask returned: %q, want %q", got, want)
	}
	if hs, err := e.db.TaskHandles(); err != nil || len(hs) != 0 {
		t.Fatalf("handles: %v, %v", hs, err)
	}
	// The driver is usable again: the next plugin is running.
	testutil.WaitFor(t, generous, func() error {
		_, err := d.TaskConfigSpec(ctxT(t))
		return err
	})
}
