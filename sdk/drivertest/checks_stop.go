package drivertest

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

func checkStopRunning(t *testing.T, s *suite) {
	d := s.driver
	cfg := s.task(t, s.h.Cases.RunUntilStopped())
	s.startReady(t, d, cfg)
	if st := s.inspect(t, d, cfg.GetId()); st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("InspectTask of a running task = %v, want running", st)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := d.StopTask(ctx, cfg.GetId(), s.h.Timeout, "SIGTERM"); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	// StopTask returns once the task has exited: the result is there.
	st := s.inspect(t, d, cfg.GetId())
	if st.GetState() != driverpb.TaskState_TASK_STATE_EXITED {
		t.Fatalf("InspectTask right after StopTask = %v, want exited", st)
	}
	res := s.wait(t, d, cfg.GetId())
	if res.GetSignal() == int32(syscall.SIGKILL) {
		t.Errorf("task that exits on SIGTERM was killed (result %v): stop did not wait for it", res)
	}
	if err := d.StopTask(ctx, cfg.GetId(), time.Second, "SIGTERM"); err != nil {
		t.Errorf("second StopTask of an exited task: %v, want nil", err)
	}
	if err := d.DestroyTask(ctx, cfg.GetId(), false); err != nil {
		t.Errorf("DestroyTask of an exited task: %v", err)
	}
	if err := d.DestroyTask(ctx, cfg.GetId(), false); err != nil {
		t.Errorf("second DestroyTask: %v, want nil", err)
	}
	_, err := d.InspectTask(ctx, cfg.GetId())
	wantErr(t, "InspectTask after destroy", err, sdk.ErrTaskNotFound)
}

func checkStopTimeoutKills(t *testing.T, s *suite) {
	if s.h.Cases.IgnoreStopSignal == nil {
		t.Skip("Cases.IgnoreStopSignal not provided")
	}
	d := s.driver
	cfg := s.task(t, s.h.Cases.IgnoreStopSignal())
	s.startReady(t, d, cfg)
	ctx, cancel := s.ctx()
	defer cancel()
	const stopTimeout = 300 * time.Millisecond
	begin := time.Now()
	if err := d.StopTask(ctx, cfg.GetId(), stopTimeout, "SIGTERM"); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	if took := time.Since(begin); took < stopTimeout {
		t.Errorf("StopTask returned after %s, before the %s timeout: the stop signal was not ignored or no timeout was given", took, stopTimeout)
	}
	res := s.wait(t, d, cfg.GetId())
	if res.GetSignal() != int32(syscall.SIGKILL) {
		t.Errorf("task ignoring SIGTERM ended with %v, want killed by SIGKILL (9)", res)
	}
	if res.GetExitCode() != 128+int32(syscall.SIGKILL) {
		t.Errorf("killed task exit code %d, want %d (128+9)", res.GetExitCode(), 128+9)
	}
}

func checkDestroyRunning(t *testing.T, s *suite) {
	d := s.driver
	cfg := s.task(t, s.h.Cases.RunUntilStopped())
	s.startReady(t, d, cfg)
	ctx, cancel := s.ctx()
	defer cancel()
	wantErr(t, "DestroyTask(force=false) of a running task", d.DestroyTask(ctx, cfg.GetId(), false), sdk.ErrTaskRunning)
	if st := s.inspect(t, d, cfg.GetId()); st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Errorf("refused destroy changed the task: %v", st)
	}
	if err := d.DestroyTask(ctx, cfg.GetId(), true); err != nil {
		t.Fatalf("DestroyTask(force=true): %v", err)
	}
	_, err := d.InspectTask(ctx, cfg.GetId())
	wantErr(t, "InspectTask after forced destroy", err, sdk.ErrTaskNotFound)
}

func checkWaitContext(t *testing.T, s *suite) {
	d := s.driver
	cfg := s.task(t, s.h.Cases.RunUntilStopped())
	s.startReady(t, d, cfg)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := d.WaitTask(short, cfg.GetId())
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sdk.ErrPluginShutdown) {
		t.Errorf("WaitTask with an expiring context: %v, want context.DeadlineExceeded", err)
	}
	if st := s.inspect(t, d, cfg.GetId()); st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Errorf("abandoned WaitTask affected the task: %v", st)
	}
}

func checkSignal(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	d := s.driver
	caps, err := d.Capabilities(ctx)
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	if !caps.GetSendSignals() {
		t.Skip("driver does not have the send_signals capability")
	}
	cfg := s.task(t, s.h.Cases.RunUntilStopped())
	s.startReady(t, d, cfg)
	wantErr(t, "SignalTask with an unknown signal", d.SignalTask(ctx, cfg.GetId(), "SIGNOPE"), sdk.ErrInvalidSignal)
	if err := d.SignalTask(ctx, cfg.GetId(), "SIGTERM"); err != nil {
		t.Fatalf("SignalTask(SIGTERM): %v", err)
	}
	// RunUntilStopped exits on SIGTERM, so the signal arrived if it ends.
	s.wait(t, d, cfg.GetId())
	wantErr(t, "SignalTask of an exited task", d.SignalTask(ctx, cfg.GetId(), "SIGTERM"), sdk.ErrTaskNotRunning)
}
