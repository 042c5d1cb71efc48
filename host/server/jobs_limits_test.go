package server

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// Register and plan refuse a job over the server's limits, naming the
// limit, the value and the config key, before anything is written or
// planned.
func TestRegisterAndPlanRefuseAJobOverTheLimits(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.JobLimits = jobspec.Limits{MaxGroupCount: 5} })
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
