package mock_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/builtin/drivers/mock"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
)

// generous bounds operations that should finish promptly; tests never
// fail for slowness within it.
const generous = 60 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	t.Cleanup(cancel)
	return ctx
}

// client is a mock driver behind in-process gRPC, so every test crosses
// the protocol's encoding and error mapping.
func client(t *testing.T) *sdk.DriverClient {
	return drivertest.InProcess(t, mock.New(drivertest.Logger(t)))
}

func taskCfg(id string, cfg sdk.ConfigMap) *driverpb.TaskConfig {
	return &driverpb.TaskConfig{Id: id, Name: "web", DriverConfig: cfg}
}

func start(t *testing.T, d sdk.Driver, id string, cfg sdk.ConfigMap) *driverpb.TaskHandle {
	t.Helper()
	h, err := d.StartTask(ctxT(t), taskCfg(id, cfg))
	if err != nil {
		t.Fatalf("StartTask(%s): %v", id, err)
	}
	return h
}

func TestRunForExitsWithConfiguredResult(t *testing.T) {
	d := client(t)
	cases := []struct {
		name string
		cfg  sdk.ConfigMap
		want *driverpb.ExitResult
	}{
		{"code", sdk.ConfigMap{"run_for": sdk.StringValue("150ms"), "exit_code": sdk.IntValue(3)},
			&driverpb.ExitResult{ExitCode: 3}},
		{"signal", sdk.ConfigMap{"run_for": sdk.StringValue("150ms"), "exit_signal": sdk.StringValue("SIGSEGV")},
			&driverpb.ExitResult{ExitCode: 128 + 11, Signal: 11}},
		{"error", sdk.ConfigMap{"run_for": sdk.StringValue("150ms"), "exit_code": sdk.IntValue(1), "exit_error": sdk.StringValue("disk full")},
			&driverpb.ExitResult{ExitCode: 1, Err: "disk full"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			begin := time.Now()
			start(t, d, "run-for-"+c.name, c.cfg)
			res, err := d.WaitTask(ctxT(t), "run-for-"+c.name)
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(begin); took < 150*time.Millisecond {
				t.Errorf("task exited after %s, before run_for 150ms", took)
			}
			if res.GetExitCode() != c.want.GetExitCode() || res.GetSignal() != c.want.GetSignal() || res.GetErr() != c.want.GetErr() {
				t.Errorf("exit %v, want %v", res, c.want)
			}
			if res.GetFinishedAt() < begin.UnixNano() {
				t.Errorf("finished_at %d before the start %d", res.GetFinishedAt(), begin.UnixNano())
			}
		})
	}
}

func TestStartError(t *testing.T) {
	d := client(t)
	_, err := d.StartTask(ctxT(t), taskCfg("bad-start", sdk.ConfigMap{"start_error": sdk.StringValue("image pull failed")}))
	var rerr *sdk.RPCError
	if !errors.As(err, &rerr) || !strings.Contains(rerr.Message, "image pull failed") || rerr.Method != "StartTask" || rerr.Plugin != mock.Name {
		t.Fatalf("StartTask = %v, want an RPCError from mock StartTask carrying the configured message", err)
	}
	if _, err := d.InspectTask(ctxT(t), "bad-start"); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Errorf("failed start left a task behind: %v", err)
	}
}

func TestStartBlocks(t *testing.T) {
	d := client(t)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := d.StartTask(short, taskCfg("blocked", sdk.ConfigMap{"start_block_for": sdk.StringValue("1h")}))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("StartTask blocking past its deadline = %v, want DeadlineExceeded", err)
	}
	begin := time.Now()
	start(t, d, "slow", sdk.ConfigMap{"start_block_for": sdk.StringValue("200ms")})
	if took := time.Since(begin); took < 200*time.Millisecond {
		t.Errorf("StartTask returned after %s, want at least start_block_for 200ms", took)
	}
}

func TestIgnoreStopSignal(t *testing.T) {
	d := client(t)
	ctx := ctxT(t)
	start(t, d, "stubborn", sdk.ConfigMap{"ignore_stop_signal": sdk.BoolValue(true)})
	for _, sig := range []string{"SIGTERM", "SIGINT", "SIGHUP"} {
		if err := d.SignalTask(ctx, "stubborn", sig); err != nil {
			t.Fatalf("SignalTask(%s): %v", sig, err)
		}
	}
	st, err := d.InspectTask(ctx, "stubborn")
	if err != nil || st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("after ignored signals: %v, %v; want running", st, err)
	}
	if got := st.GetAttributes()["signals"]; got != "SIGTERM,SIGINT,SIGHUP" {
		t.Errorf("recorded signals %q, want SIGTERM,SIGINT,SIGHUP", got)
	}
	if err := d.SignalTask(ctx, "stubborn", "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	res, err := d.WaitTask(ctx, "stubborn")
	if err != nil || res.GetSignal() != int32(syscall.SIGKILL) {
		t.Errorf("after SIGKILL: %v, %v; want killed by 9", res, err)
	}
}

func TestSignalsOtherThanStopAreRecordedNotFatal(t *testing.T) {
	d := client(t)
	ctx := ctxT(t)
	evctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := d.TaskEvents(evctx)
	start(t, d, "hup", sdk.ConfigMap{})
	if err := d.SignalTask(ctx, "hup", "USR1"); err != nil {
		t.Fatal(err)
	}
	if st, _ := d.InspectTask(ctx, "hup"); st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Errorf("SIGUSR1 ended the task: %v", st)
	}
	var got []string
	for ev, err := range events {
		if err != nil {
			t.Fatalf("TaskEvents: %v", err)
		}
		if ev.GetTaskId() != "hup" {
			continue
		}
		got = append(got, ev.GetMessage())
		if ev.GetAnnotations()["signal"] == "SIGUSR1" {
			break
		}
	}
	// The start is the runner's to record; the driver tells only what
	// the runner cannot see.
	if len(got) != 1 || got[0] != "received SIGUSR1" {
		t.Errorf("events %q, want [received SIGUSR1]", got)
	}
}

// waitHealth pulls fingerprints until one has health want.
func waitHealth(t *testing.T, d sdk.Driver, want driverpb.Health) *driverpb.DriverFingerprint {
	t.Helper()
	for fp, err := range d.Fingerprint(ctxT(t)) {
		if err != nil {
			t.Fatalf("Fingerprint: %v", err)
		}
		if fp.GetHealth() == want {
			return fp
		}
	}
	t.Fatalf("fingerprint stream ended before reaching %s", want)
	return nil
}

func TestPluginConfigUnhealthyAfterAndAttributes(t *testing.T) {
	d := client(t)
	err := d.SetConfig(ctxT(t), &driverpb.PluginConfig{Values: sdk.ConfigMap{
		"unhealthy_after": sdk.StringValue("100ms"),
		"attributes":      sdk.MapValue(map[string]string{"driver.mock.rack": "r1"}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	fp := waitHealth(t, d, driverpb.Health_HEALTH_UNHEALTHY)
	if !strings.Contains(fp.GetHealthDescription(), "unhealthy_after") {
		t.Errorf("unhealthy description %q does not say why", fp.GetHealthDescription())
	}
	if fp.GetAttributes()["driver.mock.rack"] != "r1" || fp.GetAttributes()["driver.mock"] != "true" {
		t.Errorf("attributes %v, want driver.mock=true and driver.mock.rack=r1", fp.GetAttributes())
	}
	// A new config resets health.
	if err := d.SetConfig(ctxT(t), &driverpb.PluginConfig{}); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, d, driverpb.Health_HEALTH_HEALTHY)
}

func TestTaskTurnsDriverUnhealthy(t *testing.T) {
	d := client(t)
	waitHealth(t, d, driverpb.Health_HEALTH_HEALTHY)
	start(t, d, "poison", sdk.ConfigMap{"driver_unhealthy_after": sdk.StringValue("100ms")})
	fp := waitHealth(t, d, driverpb.Health_HEALTH_UNHEALTHY)
	if !strings.Contains(fp.GetHealthDescription(), "poison") {
		t.Errorf("description %q does not name the task", fp.GetHealthDescription())
	}
}

func TestRecoverKeepsSchedule(t *testing.T) {
	first := client(t)
	ctx := ctxT(t)
	done := start(t, first, "done", sdk.ConfigMap{"run_for": sdk.StringValue("50ms"), "exit_code": sdk.IntValue(4)})
	later := start(t, first, "later", sdk.ConfigMap{"run_for": sdk.StringValue("1h")})
	time.Sleep(100 * time.Millisecond) // "done" is due while no driver watches it

	second := client(t)
	for _, h := range []*driverpb.TaskHandle{done, later} {
		if err := second.RecoverTask(ctx, h); err != nil {
			t.Fatalf("RecoverTask(%s): %v", h.GetConfig().GetId(), err)
		}
	}
	res, err := second.WaitTask(ctx, "done")
	if err != nil || res.GetExitCode() != 4 {
		t.Errorf("recovered overdue task: %v, %v; want exit 4", res, err)
	}
	st, err := second.InspectTask(ctx, "later")
	if err != nil || st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING || st.GetStartedAt() != later.GetStartedAt() {
		t.Errorf("recovered running task: %v, %v; want running since %d", st, err, later.GetStartedAt())
	}
}

// TestCrashPlugin runs the mock as a real plugin process: crash_plugin_after
// takes the process down, and the client sees ErrPluginShutdown.
func TestCrashPlugin(t *testing.T) {
	p := drivertest.Launch(t, nil)
	d := p.Driver()
	start(t, d, "crasher", sdk.ConfigMap{"crash_plugin_after": sdk.StringValue("200ms")})
	_, err := d.WaitTask(ctxT(t), "crasher")
	if !errors.Is(err, sdk.ErrPluginShutdown) {
		t.Fatalf("WaitTask across a plugin crash = %v, want ErrPluginShutdown", err)
	}
	deadline := time.Now().Add(generous)
	for !p.Exited() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !p.Exited() {
		t.Error("plugin process still running after its crash")
	}
	if _, err := d.InspectTask(ctxT(t), "crasher"); !errors.Is(err, sdk.ErrPluginShutdown) {
		t.Errorf("call after the crash = %v, want ErrPluginShutdown", err)
	}
}

// TestMountsAreRecordedAndSurviveRecovery: a task reports the mounts it was
// started with, and a plugin that recovers it from its handle reports the
// same ones; a task without mounts reports none.
func TestMountsAreRecordedAndSurviveRecovery(t *testing.T) {
	d := client(t)
	mounts := []*driverpb.Mount{
		{HostPath: "/srv/csi", TaskPath: "/csi", Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL},
		{HostPath: "/etc/ssl", TaskPath: "/etc/ssl", ReadOnly: true},
	}
	cfg := taskCfg("mounted", nil)
	cfg.Mounts = mounts
	h, err := d.StartTask(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	start(t, d, "unmounted", nil)
	second := client(t)
	if err := second.RecoverTask(ctxT(t), h); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		d    sdk.Driver
		id   string
		want []*driverpb.Mount
	}{{d, "mounted", mounts}, {second, "mounted", mounts}, {d, "unmounted", nil}} {
		st, err := c.d.InspectTask(ctxT(t), c.id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := mock.Mounts(st)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(c.want) {
			t.Fatalf("task %s reports mounts %v, want %v", c.id, got, c.want)
		}
		for i := range got {
			if !proto.Equal(got[i], c.want[i]) {
				t.Errorf("task %s mount %d = %v, want %v", c.id, i, got[i], c.want[i])
			}
		}
	}
	if _, err := mock.Mounts(&driverpb.TaskStatus{Id: "x"}); err == nil {
		t.Error("Mounts of a status without the attribute succeeded")
	}
}
