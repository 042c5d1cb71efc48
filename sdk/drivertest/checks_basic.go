package drivertest

import (
	"sync"
	"testing"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

func checkInfo(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	d := s.driver
	if d.APIVersion() < sdk.MinAPIVersion || d.APIVersion() > sdk.APIVersion {
		t.Errorf("negotiated API version %d, want %d..%d", d.APIVersion(), sdk.MinAPIVersion, sdk.APIVersion)
	}
	info, err := d.PluginInfo(ctx)
	if err != nil || info.GetName() == "" {
		t.Errorf("PluginInfo = %v, %v; want a name", info, err)
	}
	if _, err := d.Capabilities(ctx); err != nil {
		t.Errorf("Capabilities: %v", err)
	}
	schemas, err := d.ConfigSchema(ctx)
	if err != nil {
		t.Fatalf("ConfigSchema: %v", err)
	}
	// Every config the harness was given must pass the driver's own schema.
	spec := sdk.ConfigSpec{Plugin: d.Name(), Scope: sdk.ScopeTaskConfig, Schema: schemas.GetTask()}
	for name, cfg := range map[string]sdk.ConfigMap{
		"ExitCode(0)":     s.h.Cases.ExitCode(0),
		"RunUntilStopped": s.h.Cases.RunUntilStopped(),
	} {
		if _, err := spec.Validate(cfg); err != nil {
			t.Errorf("Cases.%s does not validate against the driver's task schema: %v", name, err)
		}
	}
	pspec := sdk.ConfigSpec{Plugin: d.Name(), Scope: sdk.ScopePlugin, Schema: schemas.GetPlugin()}
	if _, err := pspec.Validate(s.h.PluginConfig); err != nil {
		t.Errorf("Harness.PluginConfig does not validate against the driver's plugin schema: %v", err)
	}
}

func checkFingerprint(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	for fp, err := range s.driver.Fingerprint(ctx) {
		if err != nil {
			t.Fatalf("Fingerprint: %v", err)
		}
		if fp.GetHealth() != driverpb.Health_HEALTH_HEALTHY {
			t.Errorf("first fingerprint after SetConfig(%v) is %s (%q), want healthy",
				s.h.PluginConfig, fp.GetHealth(), fp.GetHealthDescription())
		}
		return
	}
	t.Fatal("Fingerprint ended without sending a fingerprint")
}

func checkExitCodes(t *testing.T, s *suite) {
	for _, code := range []int{0, 1, 7, 255} {
		cfg := s.task(t, s.h.Cases.ExitCode(code))
		h := s.start(t, s.driver, cfg)
		if h.GetDriver() != s.driver.Name() {
			t.Errorf("handle names driver %q, want %q", h.GetDriver(), s.driver.Name())
		}
		res := s.wait(t, s.driver, cfg.GetId())
		if res.GetExitCode() != int32(code) || res.GetSignal() != 0 || res.GetErr() != "" {
			t.Errorf("ExitCode(%d) task ended with %v, want exit code %d, no signal, no error", code, res, code)
		}
		// A second wait answers the same, at once.
		if again := s.wait(t, s.driver, cfg.GetId()); again.GetExitCode() != res.GetExitCode() {
			t.Errorf("second WaitTask = %v, first %v", again, res)
		}
		st := s.inspect(t, s.driver, cfg.GetId())
		if st.GetState() != driverpb.TaskState_TASK_STATE_EXITED || st.GetExitResult().GetExitCode() != int32(code) {
			t.Errorf("InspectTask after exit = %v, want exited with %d", st, code)
		}
		if st.GetCompletedAt() < st.GetStartedAt() || st.GetStartedAt() == 0 {
			t.Errorf("InspectTask times: started %d completed %d", st.GetStartedAt(), st.GetCompletedAt())
		}
	}
}

func checkConcurrent(t *testing.T, s *suite) {
	const n = 8
	cfgs := make([]*driverpb.TaskConfig, n)
	for i := range cfgs {
		cfgs[i] = s.task(t, s.h.Cases.ExitCode(i))
	}
	var wg sync.WaitGroup
	results := make([]*driverpb.ExitResult, n)
	errs := make([]error, n)
	for i, cfg := range cfgs {
		wg.Go(func() {
			ctx, cancel := s.ctx()
			defer cancel()
			if _, err := s.driver.StartTask(ctx, cfg); err != nil {
				errs[i] = err
				return
			}
			results[i], errs[i] = s.driver.WaitTask(ctx, cfg.GetId())
		})
	}
	wg.Wait()
	for i, cfg := range cfgs {
		s.destroy(t, s.driver, cfg.GetId())
		if errs[i] != nil {
			t.Errorf("task %d: %v", i, errs[i])
			continue
		}
		if results[i].GetExitCode() != int32(i) {
			t.Errorf("task %d exited %d, want %d", i, results[i].GetExitCode(), i)
		}
	}
}
