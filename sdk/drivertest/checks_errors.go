package drivertest

import (
	"errors"
	"testing"
	"time"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

func checkUnknownTask(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	d := s.driver
	const id = "drivertest-no-such-task"
	_, err := d.WaitTask(ctx, id)
	wantErr(t, "WaitTask", err, sdk.ErrTaskNotFound)
	_, err = d.InspectTask(ctx, id)
	wantErr(t, "InspectTask", err, sdk.ErrTaskNotFound)
	wantErr(t, "StopTask", d.StopTask(ctx, id, time.Second, "SIGTERM"), sdk.ErrTaskNotFound)
	wantErr(t, "SignalTask", d.SignalTask(ctx, id, "SIGTERM"), sdk.ErrTaskNotFound)
	if err := d.DestroyTask(ctx, id, false); err != nil {
		t.Errorf("DestroyTask of an unknown task: %v, want nil", err)
	}
}

func checkDuplicateID(t *testing.T, s *suite) {
	d := s.driver
	cfg := s.task(t, s.h.Cases.RunUntilStopped())
	s.start(t, d, cfg)
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := d.StartTask(ctx, cfg)
	wantErr(t, "second StartTask with the same ID", err, sdk.ErrTaskExists)
	if st := s.inspect(t, d, cfg.GetId()); st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Errorf("refused duplicate start changed the first task: %v", st)
	}
}

// wantConfigError checks that err is ErrInvalidConfig and names key.
func wantConfigError(t *testing.T, what string, err error, plugin string, scope sdk.ConfigScope, key string) {
	t.Helper()
	if !errors.Is(err, sdk.ErrInvalidConfig) {
		t.Errorf("%s: got %v, want ErrInvalidConfig", what, err)
		return
	}
	var ce *sdk.ConfigError
	if !errors.As(err, &ce) {
		t.Errorf("%s: %v carries no *sdk.ConfigError", what, err)
		return
	}
	if ce.Key != key || ce.Scope != scope || ce.Plugin != plugin || ce.Problem == "" {
		t.Errorf("%s: ConfigError %+v, want plugin %q, scope %q, key %q and a problem", what, ce, plugin, scope, key)
	}
}

func checkBadTaskConfig(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	d := s.driver
	unknown := s.h.Cases.ExitCode(0)
	unknown["drivertest_no_such_key"] = sdk.StringValue("x")
	bad := append([]BadConfig{{Config: unknown, Key: "drivertest_no_such_key"}}, s.h.Cases.BadConfigs...)
	for _, b := range bad {
		cfg := s.task(t, b.Config)
		_, err := d.StartTask(ctx, cfg)
		wantConfigError(t, "StartTask with bad key "+b.Key, err, d.Name(), sdk.ScopeTaskConfig, b.Key)
		if _, err := d.InspectTask(ctx, cfg.GetId()); !errors.Is(err, sdk.ErrTaskNotFound) {
			t.Errorf("rejected task %s exists: InspectTask = %v", cfg.GetId(), err)
		}
	}
	cfg := s.task(t, s.h.Cases.ExitCode(0))
	cfg.Id = "../escape"
	_, err := d.StartTask(ctx, cfg)
	wantConfigError(t, "StartTask with an invalid task ID", err, d.Name(), sdk.ScopeTask, "id")
}

func checkBadPluginConfig(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	d := s.driver
	bad := sdk.ConfigMap{"drivertest_no_such_key": sdk.BoolValue(true)}
	for k, v := range s.h.PluginConfig {
		bad[k] = v
	}
	err := d.SetConfig(ctx, &driverpb.PluginConfig{Values: bad})
	wantConfigError(t, "SetConfig with an unknown key", err, d.Name(), sdk.ScopePlugin, "drivertest_no_such_key")
	// The driver keeps working with its previous config.
	cfg := s.task(t, s.h.Cases.ExitCode(3))
	s.start(t, d, cfg)
	if res := s.wait(t, d, cfg.GetId()); res.GetExitCode() != 3 {
		t.Errorf("task after a rejected SetConfig exited %v, want 3", res)
	}
}
