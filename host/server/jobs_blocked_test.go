package server

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func TestBlockedEvalUnblocksWhenAnUpdateFreesMemory(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	if _, err := tc.register(s, workNode("n1")); err != nil {
		t.Fatal(err)
	}
	jobs := pb.NewJobsClient(tc.conn(s))
	big := serviceJob("big", 1)
	big.Groups[0].Tasks[0].Resources.MemoryMb = 3000
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: big}); err != nil {
		t.Fatal(err)
	}
	waitAllocs(t, tc, s, "big", 1, nil)
	waiter := serviceJob("waiter", 1)
	waiter.Groups[0].Tasks[0].Resources.MemoryMb = 2000
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: waiter}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 15*time.Second, func() error {
		evs, err := s.State().EvalsByJob(nil, "waiter")
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.GetStatus() == pb.EvalStatus_EVAL_STATUS_BLOCKED && e.GetSnapshotIndex() > 0 {
				return nil
			}
		}
		return errors.New("no settled blocked eval yet")
	})
	time.Sleep(500 * time.Millisecond)
	small := serviceJob("big", 1)
	small.Groups[0].Tasks[0].Resources.MemoryMb = 1000
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: small}); err != nil {
		t.Fatal(err)
	}
	waitAllocs(t, tc, s, "big", 1, func(as []*pb.Allocation) error {
		if as[0].GetResources().GetMemoryMb() != 1000 {
			return fmt.Errorf("big still at %d MB", as[0].GetResources().GetMemoryMb())
		}
		return nil
	})
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := len(liveAllocs(t, tc, s, "waiter")); got != 1 {
			return fmt.Errorf("waiter has %d allocs though 3000 of 4096 MB are free", got)
		}
		return nil
	})
}
func TestStoppedJobWithBlockedEvalBecomesDead(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	if _, err := tc.register(s, workNode("n1")); err != nil {
		t.Fatal(err)
	}
	jobs := pb.NewJobsClient(tc.conn(s))
	huge := serviceJob("huge", 1)
	huge.Groups[0].Tasks[0].Resources.MemoryMb = 8000
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: huge}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		evs, _ := s.State().EvalsByJob(nil, "huge")
		for _, e := range evs {
			if e.GetStatus() == pb.EvalStatus_EVAL_STATUS_BLOCKED && e.GetSnapshotIndex() > 0 {
				return nil
			}
		}
		return fmt.Errorf("no blocked eval yet")
	})
	dr, err := jobs.Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "huge"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		e, _ := s.State().EvalByID(nil, dr.GetEvalId())
		if e.GetStatus() != pb.EvalStatus_EVAL_STATUS_COMPLETE {
			return fmt.Errorf("deregister eval %s", e.GetStatus())
		}
		if j, _ := s.State().JobByID(nil, "huge"); j.GetStatus() != pb.JobStatus_JOB_STATUS_DEAD {
			return fmt.Errorf("stopped job is %s", j.GetStatus())
		}
		return nil
	})
}
