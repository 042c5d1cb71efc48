package taskdrivers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"berth.dev/berth/internal/backoff"
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
// start reuses its ID: the next plugin destroys the ID before any call
// gets that plugin.
func TestPluginDyingInStartTaskHasTheTaskDestroyedOnTheNextPlugin(t *testing.T) {
	e := newEnv(t)
	calls := filepath.Join(t.TempDir(), "calls")
	e.script("dies", fmt.Sprintf("%s=%q %s=startdie %s=dies exec %q", fakeCallsEnv, calls, fakeEnv, fakeNameEnv, testExecutable(t)), 0o755)
	m := e.newManager(e.catalog(), nil)
	e.start(m)
	d := driver(t, m, "dies")
	_, err := d.StartTask(ctxT(t), &driverpb.TaskConfig{Id: "d1", Name: "web", DriverConfig: sdk.ConfigMap{"run_for": sdk.StringValue("1h")}})
	wantErr(t, err, sdk.ErrPluginShutdown)
	if hs, err := e.db.TaskHandles(); err != nil || len(hs) != 0 {
		t.Fatalf("handles: %v, %v", hs, err)
	}
	// The driver is usable again: the next plugin is running, and it
	// destroyed the task before it answered a call.
	testutil.WaitFor(t, generous, func() error {
		_, err := d.TaskConfigSpec(ctxT(t))
		return err
	})
	if got, want := fakeCalls(t, calls), []string{"StartTask d1", "DestroyTask d1 true"}; !slices.Equal(got, want) {
		t.Fatalf("calls the plugins saw by the time the next plugin answered a call: %q, want %q", got, want)
	}
	if p := d.in.pendingDestroys(); len(p) != 0 {
		t.Fatalf("destroys still pending: %q", p)
	}
}

// The failed start does not wait for the next plugin, which may be a
// backoff away: its caller (an alloc being stopped, a shutdown) gets
// ErrPluginShutdown at once, the ID stays pending for the next plugin, and
// no start may reuse it until then.
func TestPluginDyingInStartTaskReturnsAtOnceWhenTheNextPluginIsFarAway(t *testing.T) {
	e := newEnv(t)
	calls := filepath.Join(t.TempDir(), "calls")
	e.script("dies", fmt.Sprintf("%s=%q %s=startdie %s=dies exec %q", fakeCallsEnv, calls, fakeEnv, fakeNameEnv, testExecutable(t)), 0o755)
	m := e.newManager(e.catalog(), func(c *Config) {
		c.Backoff = backoff.Backoff{Initial: time.Hour, Max: time.Hour}
		c.CleanupTimeout = 10 * generous // the wait this test rules out
	})
	e.start(m)
	d := driver(t, m, "dies")
	done := make(chan error, 1)
	go func() {
		_, err := d.StartTask(ctxT(t), &driverpb.TaskConfig{Id: "d1", Name: "web", DriverConfig: sdk.ConfigMap{"run_for": sdk.StringValue("1h")}})
		done <- err
	}()
	select {
	case err := <-done:
		wantErr(t, err, sdk.ErrPluginShutdown)
	case <-time.After(generous):
		t.Fatal("StartTask waited for the next plugin, an hour's backoff away")
	}
	if got, want := d.in.pendingDestroys(), []string{"d1"}; !slices.Equal(got, want) {
		t.Fatalf("destroys pending: %q, want %q", got, want)
	}
	_, err := d.StartTask(ctxT(t), &driverpb.TaskConfig{Id: "d1", Name: "web"})
	wantErr(t, err, sdk.ErrTaskExists)
	if got, want := fakeCalls(t, calls), []string{"StartTask d1"}; !slices.Equal(got, want) {
		t.Fatalf("calls the plugins saw: %q, want %q", got, want)
	}
}
