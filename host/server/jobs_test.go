package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// rawExecSchema is the shape of raw_exec's task schema, enough for the
// servers' config check.
var rawExecSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "command", Type: driverpb.FieldType_FIELD_TYPE_STRING, Required: true},
	{Name: "args", Type: driverpb.FieldType_FIELD_TYPE_LIST},
}}

// workNode is a node that can run raw_exec tasks: 4 GHz and 4 GiB.
func workNode(name string) *pb.Node {
	n := testNode(name)
	n.Resources = &pb.NodeResources{CpuMhz: 4000, MemoryMb: 4096}
	n.Drivers = map[string]*pb.DriverInfo{"raw_exec": {
		Name: "raw_exec", Detected: true, Healthy: true, TaskSchema: rawExecSchema,
	}}
	return n
}

func serviceJob(id string, count int32) *pb.Job {
	return &pb.Job{
		Id: id, Name: id, Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
		Groups: []*pb.TaskGroup{{
			Name: "g", Count: count,
			Tasks: []*pb.Task{{
				Name: "t", Driver: "raw_exec",
				Config: map[string]*driverpb.ConfigValue{
					"command": {Kind: &driverpb.ConfigValue_StringValue{StringValue: "/bin/sleep"}},
				},
				Resources: &pb.TaskResources{CpuMhz: 100, MemoryMb: 128},
			}},
		}},
	}
}

func ctx10s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// liveAllocs reads the job's allocs the servers want running.
func liveAllocs(t *testing.T, tc *testCluster, s *Server, job string) []*pb.Allocation {
	t.Helper()
	resp, err := pb.NewJobsClient(tc.conn(s)).Allocations(ctx10s(t), &pb.JobAllocationsRequest{JobId: job})
	if err != nil {
		t.Fatalf("allocations of %s: %v", job, err)
	}
	var out []*pb.Allocation
	for _, a := range resp.GetAllocs() {
		if a.GetDesiredStatus() == pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN {
			out = append(out, a)
		}
	}
	return out
}

// waitAllocs waits until the job has want allocs to run, placed as check
// accepts (nil: any placement), and returns them.
func waitAllocs(t *testing.T, tc *testCluster, s *Server, job string, want int, check func([]*pb.Allocation) error) []*pb.Allocation {
	t.Helper()
	var allocs []*pb.Allocation
	testutil.WaitFor(t, 15*time.Second, func() error {
		allocs = liveAllocs(t, tc, s, job)
		if len(allocs) != want {
			return fmt.Errorf("job %s has %d allocs to run, want %d", job, len(allocs), want)
		}
		if check != nil {
			return check(allocs)
		}
		return nil
	})
	return allocs
}

// letNodeGoDown moves the manual clock past down's TTL while alive keeps
// heartbeating, and waits until down is marked down.
func letNodeGoDown(t *testing.T, tc *testCluster, s *Server, down, alive *pb.Node) {
	t.Helper()
	nodes := pb.NewNodesClient(tc.conn(s))
	beat := func() {
		if _, err := nodes.Heartbeat(ctx10s(t), &pb.NodeHeartbeatRequest{NodeId: alive.GetId()}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		beat()
		tc.clock.Advance(s.cfg.HeartbeatTTL / 2)
	}
	beat()
	tc.clock.Advance(s.cfg.HeartbeatGrace)
	waitNode(t, s, down.GetId(), pb.NodeStatus_NODE_STATUS_DOWN)
}

func perNode(allocs []*pb.Allocation) map[string]int {
	m := map[string]int{}
	for _, a := range allocs {
		m[a.GetNodeId()]++
	}
	return m
}

func TestJobRegisterPlacesAllocsAClientSeesAndStopStopsThem(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n1, n2 := workNode("n1"), workNode("n2")
	for _, n := range []*pb.Node{n1, n2} {
		if _, err := tc.register(s, n); err != nil {
			t.Fatal(err)
		}
	}
	jobs := pb.NewJobsClient(tc.conn(s))
	reg, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: serviceJob("web", 3)})
	if err != nil {
		t.Fatal(err)
	}
	if reg.GetEvalId() == "" || len(reg.GetWarnings()) != 0 {
		t.Fatalf("register = %v", reg)
	}
	allocs := waitAllocs(t, tc, s, "web", 3, nil)
	if m := perNode(allocs); len(m) != 2 {
		t.Fatalf("3 allocs per node %v: the group's anti-affinity should use both nodes", m)
	}
	names := map[string]bool{}
	for _, a := range allocs {
		names[a.GetName()] = true
		if a.GetJobVersion() != reg.GetVersion() || a.GetEvalId() != reg.GetEvalId() {
			t.Fatalf("alloc %s: job version %d eval %s, want %d %s", a.GetId(), a.GetJobVersion(), a.GetEvalId(), reg.GetVersion(), reg.GetEvalId())
		}
	}
	for i := range 3 {
		if !names[fmt.Sprintf("web.g[%d]", i)] {
			t.Fatalf("alloc names %v lack web.g[%d]", names, i)
		}
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		ev, err := pb.NewEvalsClient(tc.conn(s)).Get(ctx10s(t), &pb.EvalGetRequest{EvalId: reg.GetEvalId()})
		if err != nil {
			return err
		}
		if ev.GetEval().GetStatus() != pb.EvalStatus_EVAL_STATUS_COMPLETE {
			return fmt.Errorf("eval %s is %s", reg.GetEvalId(), ev.GetEval().GetStatus())
		}
		return nil
	})

	// The client's watch returns its allocs with the job version they run.
	ca := pb.NewClientAllocsClient(tc.conn(s))
	w, err := ca.Watch(ctx10s(t), &pb.ClientAllocsRequest{NodeId: n1.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	mine := perNode(allocs)[n1.GetId()]
	if len(w.GetAllocs()) != mine || mine == 0 {
		t.Fatalf("watch of n1 returned %d allocs, want %d", len(w.GetAllocs()), mine)
	}
	known := map[string]uint64{}
	var updates []*pb.AllocClientUpdate
	for _, a := range w.GetAllocs() {
		if w.GetJobs()[endpoints.JobKey("web", a.GetJobVersion())] == nil {
			t.Fatalf("watch response lacks job web@%d: %v", a.GetJobVersion(), w.GetJobs())
		}
		known[a.GetId()] = a.GetAllocModifyIndex()
		updates = append(updates, &pb.AllocClientUpdate{AllocId: a.GetId(), ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING})
	}
	// A blocked watch is not woken by the client's own status updates.
	watchDone := make(chan *pb.ClientAllocsResponse, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r, err := ca.Watch(ctx, &pb.ClientAllocsRequest{NodeId: n1.GetId(), Known: known,
			Query: &pb.QueryOptions{MinIndex: w.GetMeta().GetIndex(), MaxWaitMs: 20000}})
		if err != nil {
			t.Error(err)
		}
		watchDone <- r
	}()
	if _, err := ca.Update(ctx10s(t), &pb.ClientAllocUpdateRequest{NodeId: n1.GetId(), Updates: updates}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-watchDone:
		t.Fatalf("the watch answered a client status update: %v", r)
	case <-time.After(300 * time.Millisecond):
	}
	got, err := jobs.Get(ctx10s(t), &pb.JobGetRequest{JobId: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if g := got.GetSummary().GetGroups()["g"]; g.GetRunning() != int32(mine) || g.GetPending() != int32(3-mine) {
		t.Fatalf("summary %v, want %d running, %d pending", got.GetSummary(), mine, 3-mine)
	}
	if got.GetJob().GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
		t.Fatalf("job status %s, want running", got.GetJob().GetStatus())
	}

	// job stop: the watch wakes with the allocs to stop.
	if _, err := jobs.Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "web"}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-watchDone:
		for _, a := range r.GetAllocs() {
			if a.GetDesiredStatus() != pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP {
				t.Fatalf("after job stop the watch returned alloc %s desired %s", a.GetId(), a.GetDesiredStatus())
			}
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the client's watch did not wake when its allocs were stopped")
	}
	waitAllocs(t, tc, s, "web", 0, nil)
}

func TestRegisterRefusesAConfigTheDriverRefuses(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	if _, err := tc.register(s, workNode("n1")); err != nil {
		t.Fatal(err)
	}
	job := serviceJob("bad", 1)
	job.Groups[0].Tasks[0].Config = map[string]*driverpb.ConfigValue{
		"comand": {Kind: &driverpb.ConfigValue_StringValue{StringValue: "/bin/sleep"}},
	}
	_, err := pb.NewJobsClient(tc.conn(s)).Register(ctx10s(t), &pb.JobRegisterRequest{Job: job})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("register with a misspelt config key = %v, want InvalidArgument", err)
	}
	for _, want := range []string{`task "t"`, "comand", "command"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	unknown := serviceJob("elsewhere", 1)
	unknown.Groups[0].Tasks[0].Driver = "qemu"
	resp, err := pb.NewJobsClient(tc.conn(s)).Register(ctx10s(t), &pb.JobRegisterRequest{Job: unknown})
	if err != nil {
		t.Fatalf("a driver no node has yet must not be refused: %v", err)
	}
	if len(resp.GetWarnings()) != 1 || !strings.Contains(resp.GetWarnings()[0], "qemu") {
		t.Fatalf("warnings %v, want one naming qemu", resp.GetWarnings())
	}
}

func TestNodeDownReplacesItsAllocsElsewhere(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n1, n2 := workNode("n1"), workNode("n2")
	for _, n := range []*pb.Node{n1, n2} {
		if _, err := tc.register(s, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pb.NewJobsClient(tc.conn(s)).Register(ctx10s(t), &pb.JobRegisterRequest{Job: serviceJob("web", 2)}); err != nil {
		t.Fatal(err)
	}
	before := waitAllocs(t, tc, s, "web", 2, func(as []*pb.Allocation) error {
		if m := perNode(as); len(m) != 2 {
			return fmt.Errorf("per node %v", m)
		}
		return nil
	})
	var lost string
	for _, a := range before {
		if a.GetNodeId() == n1.GetId() {
			lost = a.GetId()
		}
	}
	letNodeGoDown(t, tc, s, n1, n2)
	after := waitAllocs(t, tc, s, "web", 2, func(as []*pb.Allocation) error {
		for _, a := range as {
			if a.GetNodeId() != n2.GetId() {
				return fmt.Errorf("alloc %s still on %s", a.GetId(), a.GetNodeId())
			}
		}
		return nil
	})
	old, err := s.State().AllocByID(nil, lost)
	if err != nil || old == nil {
		t.Fatalf("lost alloc %s: %v %v", lost, old, err)
	}
	if old.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_LOST || old.GetDesiredStatus() == pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN {
		t.Fatalf("alloc of the down node: client %s desired %s, want lost and stopped", old.GetClientStatus(), old.GetDesiredStatus())
	}
	var replacement *pb.Allocation
	for _, a := range after {
		if a.GetPreviousAllocation() == lost {
			replacement = a
		}
	}
	if replacement == nil || replacement.GetName() != old.GetName() {
		t.Fatalf("no replacement of %s (%s) among %v", lost, old.GetName(), after)
	}
}

// TestLeaderFailoverMidSchedulingLosesNoEvaluation holds the leader's
// workers with evaluations in hand (scheduled, plan not yet proposed),
// partitions the leader, and lets them go only once another server leads:
// every job is placed by the new leader, exactly once, and nothing is left
// pending.
func TestLeaderFailoverMidSchedulingLosesNoEvaluation(t *testing.T) {
	var holding atomic.Bool
	inHand := make(chan string, 64)
	release := make(chan struct{})
	tc := newTestCluster(t, 3, func(c *testConfig) {
		c.hooks = &testHooks{beforePlan: func(ctx context.Context, eval *pb.Evaluation) {
			if !holding.Load() {
				return
			}
			inHand <- eval.GetJobId()
			select {
			case <-release:
			case <-ctx.Done():
			}
		}}
	})
	leader := tc.waitLeader()
	for i := range 3 {
		if _, err := tc.register(leader, workNode(fmt.Sprintf("n%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	const jobs = 12
	registered := map[string]bool{}
	register := func(via *Server, id string) {
		t.Helper()
		testutil.WaitFor(t, 20*time.Second, func() error {
			_, err := pb.NewJobsClient(tc.conn(via)).Register(ctx10s(t), &pb.JobRegisterRequest{Job: serviceJob(id, 2)})
			return err
		})
		registered[id] = true
	}
	holding.Store(true)
	follower := tc.followers(leader)[0]
	for i := range jobs / 2 {
		register(follower, fmt.Sprintf("job-%02d", i))
	}
	// The leader's workers have evaluations in hand when it goes away.
	var held string
	select {
	case held = <-inHand:
	case <-time.After(15 * time.Second):
		t.Fatal("no worker of the leader took an evaluation")
	}
	tc.partition(leader)
	newLeader := tc.waitLeader(leader)
	holding.Store(false)
	close(release)
	for i := jobs / 2; i < jobs; i++ {
		register(newLeader, fmt.Sprintf("job-%02d", i))
	}
	tc.heal(leader)
	if !registered[held] {
		t.Fatalf("the held evaluation is of job %q, which this test did not register", held)
	}
	ids := make([]string, 0, len(registered))
	for id := range registered {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		waitAllocs(t, tc, newLeader, id, 2, nil)
		// Placed once: no alloc of the job was ever made twice, not even
		// one since stopped.
		resp, err := pb.NewJobsClient(tc.conn(newLeader)).Allocations(ctx10s(t), &pb.JobAllocationsRequest{JobId: id})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, a := range resp.GetAllocs() {
			if seen[a.GetName()] {
				t.Fatalf("job %s: two allocs named %s (%d allocs in all)", id, a.GetName(), len(resp.GetAllocs()))
			}
			seen[a.GetName()] = true
		}
		if len(seen) != 2 {
			t.Fatalf("job %s: %d allocs, want 2", id, len(seen))
		}
	}
	// Nothing is left pending once every job is placed.
	testutil.WaitFor(t, 15*time.Second, func() error {
		pending, err := tc.waitLeader().State().EvalsByStatus(nil, pb.EvalStatus_EVAL_STATUS_PENDING)
		if err != nil {
			return err
		}
		if len(pending) != 0 {
			return fmt.Errorf("%d evaluations still pending", len(pending))
		}
		return nil
	})
}

func systemJob(id string) *pb.Job {
	j := serviceJob(id, 1)
	j.Type = pb.JobType_JOB_TYPE_SYSTEM
	return j
}

// TestDrainMovesServiceAllocsBeforeSystemAllocs drains a node: its service
// alloc is replaced elsewhere first; its system alloc is stopped only once
// the service alloc stopped on the client; then the drain ends and the node
// stays ineligible.
func TestDrainMovesServiceAllocsBeforeSystemAllocs(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n1, n2 := workNode("n1"), workNode("n2")
	for _, n := range []*pb.Node{n1, n2} {
		if _, err := tc.register(s, n); err != nil {
			t.Fatal(err)
		}
	}
	jobs := pb.NewJobsClient(tc.conn(s))
	for _, j := range []*pb.Job{serviceJob("web", 2), systemJob("agentd")} {
		if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: j}); err != nil {
			t.Fatal(err)
		}
	}
	spread := func(as []*pb.Allocation) error {
		if m := perNode(as); len(m) != 2 {
			return fmt.Errorf("per node %v", m)
		}
		return nil
	}
	web := waitAllocs(t, tc, s, "web", 2, spread)
	sys := waitAllocs(t, tc, s, "agentd", 2, spread)
	ca := pb.NewClientAllocsClient(tc.conn(s))
	report := func(node *pb.Node, allocs []*pb.Allocation, st pb.AllocClientStatus) {
		t.Helper()
		var ups []*pb.AllocClientUpdate
		for _, a := range allocs {
			if a.GetNodeId() == node.GetId() {
				ups = append(ups, &pb.AllocClientUpdate{AllocId: a.GetId(), ClientStatus: st})
			}
		}
		if _, err := ca.Update(ctx10s(t), &pb.ClientAllocUpdateRequest{NodeId: node.GetId(), Updates: ups}); err != nil {
			t.Fatal(err)
		}
	}
	report(n1, web, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING)
	report(n1, sys, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING)

	if _, err := pb.NewNodeOpsClient(tc.conn(s)).UpdateDrain(ctx10s(t), &pb.NodeDrainRequest{
		NodeId: n1.GetId(), Drain: &pb.DrainStrategy{DeadlineMs: int64(time.Hour / time.Millisecond)},
	}); err != nil {
		t.Fatal(err)
	}
	waitAllocs(t, tc, s, "web", 2, func(as []*pb.Allocation) error {
		if m := perNode(as); m[n1.GetId()] != 0 {
			return fmt.Errorf("web per node %v", m)
		}
		return nil
	})
	// The system alloc stays while the service alloc still runs on n1.
	sysOn := func() *pb.Allocation {
		for _, a := range sys {
			if a.GetNodeId() == n1.GetId() {
				cur, _ := s.State().AllocByID(nil, a.GetId())
				return cur
			}
		}
		return nil
	}
	time.Sleep(200 * time.Millisecond) // give a wrong drainer the chance to act
	if a := sysOn(); a.GetDesiredStatus() != pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN || a.GetDesiredTransition().GetMigrate() {
		t.Fatalf("system alloc moved before the service alloc stopped: %v", a)
	}
	report(n1, web, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if a := sysOn(); a.GetDesiredStatus() == pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN {
			return fmt.Errorf("system alloc on the drained node still desired %s", a.GetDesiredStatus())
		}
		return nil
	})
	if got := waitAllocs(t, tc, s, "agentd", 1, nil); got[0].GetNodeId() != n2.GetId() {
		t.Fatalf("the system job runs on %s, want only n2", got[0].GetNodeId())
	}
	report(n1, sys, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE)
	testutil.WaitFor(t, 10*time.Second, func() error {
		n, err := s.State().NodeByID(nil, n1.GetId())
		if err != nil {
			return err
		}
		if n.GetDrain() != nil {
			return fmt.Errorf("node still draining")
		}
		if n.GetEligibility() != pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE {
			return fmt.Errorf("drained node is %s, want ineligible", n.GetEligibility())
		}
		return nil
	})
	// Maintenance over: made eligible again, the node gets its system
	// alloc back.
	if _, err := pb.NewNodeOpsClient(tc.conn(s)).UpdateEligibility(ctx10s(t), &pb.NodeEligibilityRequest{
		NodeId: n1.GetId(), Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE,
	}); err != nil {
		t.Fatal(err)
	}
	waitAllocs(t, tc, s, "agentd", 2, spread)
}

func TestSystemGCCollectsStoppedJobsAndTheirAllocs(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n1 := workNode("n1")
	if _, err := tc.register(s, n1); err != nil {
		t.Fatal(err)
	}
	jobs := pb.NewJobsClient(tc.conn(s))
	for _, id := range []string{"keep", "gone"} {
		if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: serviceJob(id, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	gone := waitAllocs(t, tc, s, "gone", 1, nil)
	waitAllocs(t, tc, s, "keep", 1, nil)
	if _, err := jobs.Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "gone"}); err != nil {
		t.Fatal(err)
	}
	waitAllocs(t, tc, s, "gone", 0, nil)
	sys := pb.NewSystemClient(tc.conn(s))
	// The client has not reported the stopped alloc finished: nothing of
	// the job may go yet.
	if _, err := sys.GarbageCollect(ctx10s(t), &pb.GCRequest{}); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.State().JobByID(nil, "gone"); j == nil {
		t.Fatal("GC removed a stopped job whose alloc still runs on its client")
	}
	if _, err := pb.NewClientAllocsClient(tc.conn(s)).Update(ctx10s(t), &pb.ClientAllocUpdateRequest{NodeId: n1.GetId(),
		Updates: []*pb.AllocClientUpdate{{AllocId: gone[0].GetId(), ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		resp, err := sys.GarbageCollect(ctx10s(t), &pb.GCRequest{})
		if err != nil {
			return err
		}
		if j, _ := s.State().JobByID(nil, "gone"); j != nil {
			return fmt.Errorf("stopped job still there after GC %v", resp)
		}
		return nil
	})
	if a, _ := s.State().AllocByID(nil, gone[0].GetId()); a != nil {
		t.Fatalf("the stopped job's alloc survived its job: %v", a)
	}
	if j, _ := s.State().JobByID(nil, "keep"); j == nil || len(liveAllocs(t, tc, s, "keep")) != 1 {
		t.Fatal("GC touched a running job")
	}
}

// TestNodeBackGetsItsSystemAllocAgain: a node that went down loses its
// system alloc; when it heartbeats again the system job places a new one.
func TestNodeBackGetsItsSystemAllocAgain(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n1, n2 := workNode("n1"), workNode("n2")
	for _, n := range []*pb.Node{n1, n2} {
		if _, err := tc.register(s, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pb.NewJobsClient(tc.conn(s)).Register(ctx10s(t), &pb.JobRegisterRequest{Job: systemJob("agentd")}); err != nil {
		t.Fatal(err)
	}
	waitAllocs(t, tc, s, "agentd", 2, nil)
	letNodeGoDown(t, tc, s, n1, n2)
	nodes := pb.NewNodesClient(tc.conn(s))
	waitAllocs(t, tc, s, "agentd", 1, nil)
	if _, err := nodes.Heartbeat(ctx10s(t), &pb.NodeHeartbeatRequest{NodeId: n1.GetId()}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, s, n1.GetId(), pb.NodeStatus_NODE_STATUS_READY)
	waitAllocs(t, tc, s, "agentd", 2, func(as []*pb.Allocation) error {
		if m := perNode(as); m[n1.GetId()] != 1 {
			return fmt.Errorf("per node %v", m)
		}
		return nil
	})
}

// TestNodeDownEvaluatesAJobPlacedWhileItWentDown: a plan that places on a
// node between the down-marking's read of its jobs and its apply (the node
// was still ready) gets an evaluation too: the alloc is marked lost and
// replaced.
func TestNodeDownEvaluatesAJobPlacedWhileItWentDown(t *testing.T) {
	// No heartbeat timer fires (the clock is manual), so only this test's
	// own setNodeStatus call reads the hook it sets below.
	tc := newTestCluster(t, 1, func(c *testConfig) { c.hooks = &testHooks{} })
	s := tc.servers[0]
	n1, n2 := workNode("n1"), workNode("n2")
	for _, n := range []*pb.Node{n1, n2} {
		if _, err := tc.register(s, n); err != nil {
			t.Fatal(err)
		}
	}
	ops := pb.NewNodeOpsClient(tc.conn(s))
	if _, err := ops.UpdateEligibility(ctx10s(t), &pb.NodeEligibilityRequest{
		NodeId: n2.GetId(), Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE}); err != nil {
		t.Fatal(err)
	}
	// The hook places the job on n1 between setNodeStatus's read and its
	// apply.
	s.opts.hooks.beforeNodeStatus = func(string) {
		if _, err := pb.NewJobsClient(tc.conn(s)).Register(ctx10s(t), &pb.JobRegisterRequest{Job: serviceJob("web", 1)}); err != nil {
			t.Error(err)
		}
		waitAllocs(t, tc, s, "web", 1, nil)
	}
	node, _ := s.State().NodeByID(nil, n1.GetId())
	if _, err := s.statuses.Set(ctx10s(t), n1.GetId(), pb.NodeStatus_NODE_STATUS_DOWN, "missed heartbeats", node.GetModifyIndex()); err != nil {
		t.Fatal(err)
	}
	s.opts.hooks.beforeNodeStatus = nil
	if _, err := ops.UpdateEligibility(ctx10s(t), &pb.NodeEligibilityRequest{
		NodeId: n2.GetId(), Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE}); err != nil {
		t.Fatal(err)
	}
	waitAllocs(t, tc, s, "web", 1, func(as []*pb.Allocation) error {
		if as[0].GetNodeId() != n2.GetId() {
			return fmt.Errorf("web runs on %s: the alloc on down n1 was never replaced", as[0].GetNodeId())
		}
		return nil
	})
}

// TestSubListsOfUnknownJobsAndNodesAreNotFound: a job's allocations and
// evaluations and a node's allocations are NotFound naming the job or
// node when nothing of it exists, never an empty list; a purged job stays
// listable while its allocs and evaluations are left.
func TestSubListsOfUnknownJobsAndNodesAreNotFound(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n1 := workNode("n1")
	if _, err := tc.register(s, n1); err != nil {
		t.Fatal(err)
	}
	jobs := pb.NewJobsClient(tc.conn(s))
	nodes := pb.NewNodeOpsClient(tc.conn(s))
	notFound := func(what string, err error, name string) {
		t.Helper()
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), name) {
			t.Errorf("%s = %v, want NotFound naming %s", what, err, name)
		}
	}
	_, err := jobs.Allocations(ctx10s(t), &pb.JobAllocationsRequest{JobId: "ghost"})
	notFound("allocations of job ghost", err, "job ghost")
	_, err = jobs.Evaluations(ctx10s(t), &pb.JobEvaluationsRequest{JobId: "ghost"})
	notFound("evaluations of job ghost", err, "job ghost")
	_, err = nodes.Allocations(ctx10s(t), &pb.NodeAllocationsRequest{NodeId: "ghost-node"})
	notFound("allocations of node ghost-node", err, "node ghost-node")

	// A registered node with nothing on it, and a job with no alloc yet
	// placed, list empty.
	if resp, err := nodes.Allocations(ctx10s(t), &pb.NodeAllocationsRequest{NodeId: n1.GetId()}); err != nil || len(resp.GetAllocs()) != 0 {
		t.Fatalf("allocations of an empty node = %v, %v", resp, err)
	}
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: serviceJob("web", 1)}); err != nil {
		t.Fatal(err)
	}
	waitAllocs(t, tc, s, "web", 1, nil)
	if _, err := jobs.Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "web", Purge: true}); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.State().JobByID(nil, "web"); j != nil {
		t.Fatal("the purge left the job")
	}
	if resp, err := jobs.Allocations(ctx10s(t), &pb.JobAllocationsRequest{JobId: "web"}); err != nil || len(resp.GetAllocs()) != 1 {
		t.Fatalf("allocations of the purged job = %v, %v; want its one alloc", resp, err)
	}
	if resp, err := jobs.Evaluations(ctx10s(t), &pb.JobEvaluationsRequest{JobId: "web"}); err != nil || len(resp.GetEvals()) == 0 {
		t.Fatalf("evaluations of the purged job = %v, %v; want its register and purge evaluations", resp, err)
	}
}
