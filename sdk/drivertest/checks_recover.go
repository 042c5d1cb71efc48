package drivertest

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

func checkRecoverSamePlugin(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	d := s.driver
	cfg := s.task(t, s.h.Cases.RunUntilStopped())
	h := s.start(t, d, cfg)
	if err := d.RecoverTask(ctx, h); err != nil {
		t.Fatalf("RecoverTask of a task the plugin knows: %v, want nil", err)
	}
	if st := s.inspect(t, d, cfg.GetId()); st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Errorf("task after a redundant RecoverTask: %v, want running", st)
	}

	foreign := proto.Clone(h).(*driverpb.TaskHandle)
	foreign.Driver = "drivertest-some-other-driver"
	foreign.Config.Id = cfg.GetId() + "-foreign"
	wantErr(t, "RecoverTask of another driver's handle", d.RecoverTask(ctx, foreign), sdk.ErrInvalidHandle)

	corrupt := proto.Clone(h).(*driverpb.TaskHandle)
	corrupt.DriverState = []byte("\x00drivertest: not a driver state\xff")
	corrupt.Config.Id = cfg.GetId() + "-corrupt"
	wantErr(t, "RecoverTask of a corrupt handle", d.RecoverTask(ctx, corrupt), sdk.ErrInvalidHandle)
}

func checkRecoverAfterKill(t *testing.T, s *suite) {
	first := s.launch(t)
	d1 := first.Driver()

	running := s.task(t, s.h.Cases.RunUntilStopped())
	hRunning := s.startReady(t, d1, running)
	var exiting *driverpb.TaskConfig
	var hExiting *driverpb.TaskHandle
	if s.h.Cases.ExitAfter != nil {
		exiting = s.task(t, s.h.Cases.ExitAfter(7, time.Second))
		hExiting = s.start(t, d1, exiting)
	}

	pid := first.Pid()
	if pid <= 0 {
		t.Fatal("plugin has no pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 plugin %d: %v", pid, err)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	// A call to the dead plugin fails as a shutdown, not as the task's end.
	_, err := d1.WaitTask(ctx, running.GetId())
	wantErr(t, "WaitTask on a killed plugin", err, sdk.ErrPluginShutdown)
	if errors.Is(err, sdk.ErrTaskNotFound) {
		t.Errorf("dead plugin reported as missing task: %v", err)
	}

	second := s.launch(t)
	d2 := second.Driver()
	if err := d2.RecoverTask(ctx, hRunning); err != nil {
		t.Fatalf("RecoverTask in a new plugin: %v", err)
	}
	t.Cleanup(func() { s.destroy(t, d2, running.GetId()) })
	if st := s.inspect(t, d2, running.GetId()); st.GetState() != driverpb.TaskState_TASK_STATE_RUNNING {
		t.Errorf("recovered task %v, want running (it survives its plugin)", st)
	}
	if hExiting != nil {
		if err := d2.RecoverTask(ctx, hExiting); err != nil {
			t.Fatalf("RecoverTask of the ExitAfter task: %v", err)
		}
		t.Cleanup(func() { s.destroy(t, d2, exiting.GetId()) })
		res := s.wait(t, d2, exiting.GetId())
		if res.GetExitCode() != 7 || res.GetErr() != "" {
			t.Errorf("recovered task's exit %v, want its real exit code 7", res)
		}
	}
	if err := d2.StopTask(ctx, running.GetId(), s.h.Timeout, "SIGTERM"); err != nil {
		t.Fatalf("StopTask of the recovered task: %v", err)
	}
	if res := s.wait(t, d2, running.GetId()); res.GetSignal() == int32(syscall.SIGKILL) {
		t.Errorf("recovered task did not stop on SIGTERM: %v", res)
	}
}
