package server

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// Register and plan refuse a job over the server's limits, naming the
// limit, the value and the config key, before anything is written or
// planned.
func TestRegisterAndPlanRefuseAJobOverTheLimits(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *testConfig) { c.JobLimits = jobspec.Limits{MaxGroupCount: 5} })
	s := tc.servers[0]
	if _, err := tc.register(s, workNode("n1")); err != nil {
		t.Fatal(err)
	}
	jobs := pb.NewJobsClient(tc.conn(s))
	over := serviceJob("web", 6)
	_, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: over})
	want := `group "g": count: 6 is over the limit of 5 per group (server.job_max_count)`
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("register with count 6 = %v, want InvalidArgument saying %q", err, want)
	}
	if j, _ := s.State().JobByID(nil, "web"); j != nil {
		t.Fatalf("refused job was stored: %v", j)
	}
	if evals, _ := s.State().EvalsByJob(nil, "web"); len(evals) != 0 {
		t.Fatalf("refused job has evaluations: %v", evals)
	}
	_, err = jobs.Plan(ctx10s(t), &pb.JobPlanRequest{Job: over})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("plan with count 6 = %v, want InvalidArgument saying %q", err, want)
	}
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: serviceJob("web", 5)}); err != nil {
		t.Fatalf("register at the limit: %v", err)
	}
}

// No command over the message limit reaches the log: it could not travel
// to a follower's snapshot install or a forwarded write.
func TestRaftApplyRefusesACommandOverTheMessageLimit(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n := workNode("big")
	n.Meta = map[string]string{"blob": strings.Repeat("x", rpc.MaxMessageSize)}
	typ, cmd := nodeRegister(n)
	_, err := s.raftApply(ctx10s(t), typ, cmd)
	if !errors.Is(err, ErrCommandTooLarge) || status.Code(toStatus(err)) != codes.InvalidArgument {
		t.Fatalf("a command over %d bytes: %v", rpc.MaxMessageSize, err)
	}
	if got, _ := s.State().NodeByID(nil, n.GetId()); got != nil {
		t.Fatal("the command was applied")
	}
}

// A revert to a version stored under other limits is held to today's.
func TestRevertRefusesAVersionOverTheLimits(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *testConfig) { c.JobLimits = jobspec.Limits{MaxGroupCount: 5} })
	s := tc.servers[0]
	if _, err := tc.register(s, workNode("n1")); err != nil {
		t.Fatal(err)
	}
	// Version 0 was taken by a leader with a higher limit.
	old := serviceJob("web", 6)
	jobspec.Canonicalize(old)
	if _, err := s.raftApply(ctx10s(t), fsm.JobRegister, &pb.JobRegisterCommand{Job: old,
		Eval: evals.New(s.cfg.Clock.Now(), old, pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER), SubmittedAt: 1}); err != nil {
		t.Fatal(err)
	}
	jobs := pb.NewJobsClient(tc.conn(s))
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: serviceJob("web", 2)}); err != nil {
		t.Fatal(err)
	}
	_, err := jobs.Revert(ctx10s(t), &pb.JobRevertRequest{JobId: "web", Version: 0})
	want := `group "g": count: 6 is over the limit of 5 per group (server.job_max_count)`
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("revert to version 0 = %v, want InvalidArgument saying %q", err, want)
	}
	if j, _ := s.State().JobByID(nil, "web"); j.GetVersion() != 1 || j.GetGroups()[0].GetCount() != 2 {
		t.Fatalf("job after the refused revert: version %d count %d", j.GetVersion(), j.GetGroups()[0].GetCount())
	}
}

// A job stored over this leader's limits (taken by a leader with higher
// ones) is not planned: its evaluation fails for good, naming the limit,
// with no follow-up; stopping it still works.
func TestAStoredJobOverTheLimitsIsNotPlanned(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *testConfig) { c.JobLimits = jobspec.Limits{MaxGroupCount: 5} })
	s := tc.servers[0]
	if _, err := tc.register(s, workNode("n1")); err != nil {
		t.Fatal(err)
	}
	job := serviceJob("web", 6)
	jobspec.Canonicalize(job)
	eval := evals.New(s.cfg.Clock.Now(), job, pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER)
	if _, err := s.raftApply(ctx10s(t), fsm.JobRegister, &pb.JobRegisterCommand{Job: job, Eval: eval, SubmittedAt: 1}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		e, err := s.State().EvalByID(nil, eval.GetId())
		if err != nil || e == nil {
			return fmt.Errorf("eval %s: %v %v", eval.GetId(), e, err)
		}
		if e.GetStatus() != pb.EvalStatus_EVAL_STATUS_FAILED {
			return fmt.Errorf("eval %s is %s", e.GetId(), e.GetStatus())
		}
		if want := "count: 6 is over the limit of 5 per group (server.job_max_count)"; !strings.Contains(e.GetStatusDescription(), want) {
			t.Fatalf("eval description %q does not say %q", e.GetStatusDescription(), want)
		}
		return nil
	})
	if a := liveAllocs(t, tc, s, "web"); len(a) != 0 {
		t.Fatalf("%d allocs placed for a job over the limits", len(a))
	}
	if evals, _ := s.State().EvalsByJob(nil, "web"); len(evals) != 1 {
		t.Fatalf("evaluations of web %v, want the one failed, no follow-up", evals)
	}
	stop, err := pb.NewJobsClient(tc.conn(s)).Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "web"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		e, _ := s.State().EvalByID(nil, stop.GetEvalId())
		if e.GetStatus() != pb.EvalStatus_EVAL_STATUS_COMPLETE {
			return fmt.Errorf("stop eval is %s", e.GetStatus())
		}
		return nil
	})
}

// A job just under job_max_size as submitted is planned: the scheduler
// measures the stored job as register did, without the fields the servers
// add (version, indexes, status, submit time). It was accepted, then its
// evaluation failed for good as over the limit.
func TestJobJustUnderTheSizeLimitIsPlanned(t *testing.T) {
	const limit = 64 << 10
	tc := newTestCluster(t, 1, func(c *testConfig) { c.JobLimits.MaxBytes = limit })
	s := tc.servers[0]
	registerNodes(t, tc, s, workNode("n1"))
	j := serviceJob("web", 1)
	jobspec.Canonicalize(j) // as it will be stored: defaults are not what this pins
	j.Meta = map[string]string{"blob": ""}
	j.Meta["blob"] = strings.Repeat("x", limit-proto.Size(j)-8)
	for proto.Size(j) < limit {
		j.Meta["blob"] += "x"
	}
	reg := registerJob(t, tc, s, j)
	if stored, _ := s.State().JobByID(nil, "web"); proto.Size(stored) <= limit {
		t.Fatalf("the stored job is %d bytes, not over %d: this pins nothing", proto.Size(stored), limit)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		e, _ := s.State().EvalByID(nil, reg.GetEvalId())
		if e.GetStatus() == pb.EvalStatus_EVAL_STATUS_PENDING {
			return fmt.Errorf("evaluation %s is pending", e.GetId())
		}
		if e.GetStatus() != pb.EvalStatus_EVAL_STATUS_COMPLETE {
			t.Fatalf("the accepted job's evaluation is %s: %s", e.GetStatus(), e.GetStatusDescription())
		}
		return nil
	})
	waitAllocs(t, tc, s, "web", 1, nil)

	// Reverting to it is held to the same measure.
	j2 := proto.Clone(j).(*pb.Job)
	j2.Meta["blob"] = "short"
	registerJob(t, tc, s, j2)
	if _, err := pb.NewJobsClient(tc.conn(s)).Revert(ctx10s(t), &pb.JobRevertRequest{JobId: "web", Version: 0}); err != nil {
		t.Fatalf("reverting to the version accepted at register: %v", err)
	}
}

// A job under job_max_size as sent but over it once its defaults are
// filled in is refused at register, naming the limit, not accepted to fail
// at planning.
func TestJobOverTheSizeLimitWithItsDefaultsIsRefusedAtRegister(t *testing.T) {
	const limit = 64 << 10
	tc := newTestCluster(t, 1, func(c *testConfig) { c.JobLimits.MaxBytes = limit })
	s := tc.servers[0]
	j := serviceJob("web", 1)
	j.Meta = map[string]string{"blob": ""}
	c := proto.Clone(j).(*pb.Job)
	jobspec.Canonicalize(c)
	if proto.Size(c) == proto.Size(j) {
		t.Skip("Canonicalize adds nothing to this job")
	}
	j.Meta["blob"] = strings.Repeat("x", limit-proto.Size(j)-8)
	for proto.Size(j) < limit {
		j.Meta["blob"] += "x"
	}
	_, err := pb.NewJobsClient(tc.conn(s)).Register(ctx10s(t), &pb.JobRegisterRequest{Job: j})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), jobspec.KeyMaxBytes) {
		t.Fatalf("register of a job over the limit with its defaults: %v, want InvalidArgument naming %s", err, jobspec.KeyMaxBytes)
	}
}
