package server

import (
	"fmt"
	"testing"
	"time"

	"berth.dev/berth/internal/rules"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

// volumeDrain is one server and a node n1 running a healthy node instance
// of plugin "hostpath" with a volume "vol1" of it; the jobs placed go to
// n1 alone, then n2 joins (somewhere to migrate to) and n1 is drained.
type volumeDrain struct {
	t      *testing.T
	tc     *testCluster
	s      *Server
	n1, n2 *pb.Node
	allocs map[string]*pb.Allocation // job ID → its alloc on n1
}

func newVolumeDrain(t *testing.T, jobs ...*pb.Job) *volumeDrain {
	t.Helper()
	tc := newTestCluster(t, 1, withVersion(version.Version))
	vd := &volumeDrain{t: t, tc: tc, s: tc.servers[0], n1: workNode("n1"), n2: workNode("n2"), allocs: map[string]*pb.Allocation{}}
	s := vd.s
	if _, err := tc.register(s, vd.n1); err != nil {
		t.Fatal(err)
	}
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: vd.n1.GetId(),
		Nodes: map[string]*pb.CSIPluginInfo{"hostpath": {Healthy: true, Provider: "hostpath.csi.berth.dev"}}})
	vol := &pb.Volume{Id: "vol1", Name: "vol1", PluginId: "hostpath", ExternalId: "ext-1",
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: vol, RegisteredAt: 1}); err != nil {
		t.Fatalf("registering vol1: %v", err)
	}
	api := pb.NewJobsClient(tc.conn(s))
	for _, j := range jobs {
		if _, err := api.Register(ctx10s(t), &pb.JobRegisterRequest{Job: j}); err != nil {
			t.Fatalf("registering job %s: %v", j.GetId(), err)
		}
	}
	for _, j := range jobs {
		a := waitAllocs(t, tc, s, j.GetId(), 1, nil)[0]
		vd.allocs[j.GetId()] = a
		vd.report(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING, j.GetId())
	}
	if _, err := tc.register(s, vd.n2); err != nil {
		t.Fatal(err)
	}
	// n2's join evaluates the system jobs while the drain runs: the system
	// scheduler leaves a draining node's allocs to the drainer's order.
	return vd
}

// pluginJob runs the hostpath plugin's node service in a job of type typ.
func pluginJob(id string, typ pb.JobType) *pb.Job {
	j := serviceJob(id, 1)
	j.Type = typ
	j.Groups[0].Tasks[0].CsiPlugin = &pb.CSIPluginConfig{Id: "hostpath", Type: "node"}
	return j
}

// report sends n1's client status for the allocs of the jobs given and
// returns the index of the write.
func (vd *volumeDrain) report(st pb.AllocClientStatus, jobs ...string) uint64 {
	vd.t.Helper()
	var ups []*pb.AllocClientUpdate
	for _, j := range jobs {
		ups = append(ups, &pb.AllocClientUpdate{AllocId: vd.allocs[j].GetId(), ClientStatus: st})
	}
	resp, err := pb.NewClientAllocsClient(vd.tc.conn(vd.s)).Update(ctx10s(vd.t),
		&pb.ClientAllocUpdateRequest{NodeId: vd.n1.GetId(), Updates: ups})
	if err != nil {
		vd.t.Fatal(err)
	}
	return resp.GetMeta().GetIndex()
}

// drain starts draining n1 with a deadline.
func (vd *volumeDrain) drain(deadline time.Duration) {
	vd.t.Helper()
	if _, err := pb.NewNodeOpsClient(vd.tc.conn(vd.s)).UpdateDrain(ctx10s(vd.t), &pb.NodeDrainRequest{
		NodeId: vd.n1.GetId(), Drain: &pb.DrainStrategy{DeadlineMs: deadline.Milliseconds()},
	}); err != nil {
		vd.t.Fatal(err)
	}
}

// current reads the job's alloc on n1 as stored now.
func (vd *volumeDrain) current(job string) *pb.Allocation {
	a, _ := vd.s.State().AllocByID(nil, vd.allocs[job].GetId())
	return a
}

// moving: the drainer marked the alloc (or the scheduler already stopped
// it).
func moving(a *pb.Allocation) bool {
	return a.GetDesiredTransition().GetMigrate() || rules.AllocServerTerminal(a)
}

// waitMoving waits until the drainer marked the allocs of the jobs given.
func (vd *volumeDrain) waitMoving(jobs ...string) {
	vd.t.Helper()
	testutil.WaitFor(vd.t, 10*time.Second, func() error {
		for _, j := range jobs {
			if a := vd.current(j); !moving(a) {
				return fmt.Errorf("alloc of %s on the draining node not marked: %v", j, a)
			}
		}
		return nil
	})
}

// heldAfter wakes the drainer, waits until it acted on the state at index
// (or later) and fails if it marked the allocs of the jobs given. The
// drainer wakes by itself only on what it watches, so without the kick
// writes it does not watch (evaluations) could keep its last index below.
func (vd *volumeDrain) heldAfter(index uint64, why string, jobs ...string) {
	vd.t.Helper()
	vd.s.drainer.Kick()
	testutil.WaitFor(vd.t, 10*time.Second, func() error {
		if got := vd.s.drainer.Stepped(); got < index {
			return fmt.Errorf("drainer acted on index %d, waiting for %d", got, index)
		}
		return nil
	})
	for _, j := range jobs {
		if a := vd.current(j); moving(a) {
			vd.t.Fatalf("%s: alloc of %s marked: %v", why, j, a)
		}
	}
}

// claimOf returns the one claim of the job's alloc.
func (vd *volumeDrain) claimOf(job string) *pb.Claim {
	vd.t.Helper()
	cs, err := vd.s.State().ClaimsByAlloc(nil, vd.allocs[job].GetId())
	if err != nil || len(cs) != 1 {
		vd.t.Fatalf("claims of %s's alloc: %v, %v; want one", job, cs, err)
	}
	return cs[0]
}

// nodeDetached reports the job's claim unpublished and unstaged on n1, as
// the client's volume hook does after the alloc ended.
func (vd *volumeDrain) nodeDetached(job string) {
	vd.t.Helper()
	c := vd.claimOf(job)
	if _, err := pb.NewClaimsClient(vd.tc.conn(vd.s)).ClientClaimUpdate(ctx10s(vd.t), &pb.ClientClaimUpdateRequest{
		NodeId: vd.n1.GetId(), ClaimId: c.GetId(), VolumeId: c.GetVolumeId(), State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED,
	}); err != nil {
		vd.t.Fatalf("reporting %s's claim node-detached: %v", job, err)
	}
}

// waitDrained waits until n1's drain ended.
func (vd *volumeDrain) waitDrained() {
	vd.t.Helper()
	testutil.WaitFor(vd.t, 10*time.Second, func() error {
		n, err := vd.s.State().NodeByID(nil, vd.n1.GetId())
		if err != nil {
			return err
		}
		if n.GetDrain() != nil {
			return fmt.Errorf("n1 still draining")
		}
		return nil
	})
}

// TestDrainStopsVolumeUsersBeforeTheirPlugin: on a node running the
// hostpath plugin (system job), a service alloc using a hostpath volume
// and an unrelated one, a drain moves both service allocs at once; the
// plugin stays while the user runs, and while its volume is not yet
// unpublished after the user completed; once the claim is node-detached
// the plugin goes, and then the drain ends.
func TestDrainStopsVolumeUsersBeforeTheirPlugin(t *testing.T) {
	vd := newVolumeDrain(t, pluginJob("plug", pb.JobType_JOB_TYPE_SYSTEM), volumeJob("db", 1), serviceJob("web", 1))
	if c := vd.claimOf("db"); c.GetVolumeId() != "vol1" || c.GetNodeId() != vd.n1.GetId() {
		t.Fatalf("db's claim %v, want vol1 on n1", c)
	}
	vd.drain(time.Hour)
	vd.waitMoving("db", "web")
	idx, _ := vd.s.State().LatestIndex()
	vd.heldAfter(idx, "with db running", "plug")

	idx = vd.report(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, "db", "web")
	if c := vd.claimOf("db"); c.GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
		t.Fatalf("db's claim after db completed: %s, want releasing", c.GetState())
	}
	vd.heldAfter(idx, "with db complete and vol1 still published", "plug")

	vd.nodeDetached("db")
	vd.waitMoving("plug")
	testutil.WaitFor(t, 10*time.Second, func() error {
		if a := vd.current("plug"); a.GetDesiredStatus() != pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP {
			return fmt.Errorf("plugin alloc desired %s, want stopped by its job's evaluation", a.GetDesiredStatus())
		}
		return nil
	})
	vd.report(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, "plug")
	vd.waitDrained()
}

// TestDrainHoldsAPluginRunInAServiceJob: the plugin's job is a service
// job, drained in the first wave but for its users: it waits for db, then
// for db's claim to be node-detached.
func TestDrainHoldsAPluginRunInAServiceJob(t *testing.T) {
	vd := newVolumeDrain(t, pluginJob("plug", pb.JobType_JOB_TYPE_SERVICE), volumeJob("db", 1), serviceJob("web", 1))
	vd.drain(time.Hour)
	vd.waitMoving("db", "web")
	idx, _ := vd.s.State().LatestIndex()
	vd.heldAfter(idx, "with db running", "plug")

	idx = vd.report(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, "db", "web")
	vd.heldAfter(idx, "with db complete and vol1 still published", "plug")

	vd.nodeDetached("db")
	vd.waitMoving("plug")
	// Moved like any service alloc: replaced on n2.
	waitAllocs(t, vd.tc, vd.s, "plug", 1, func(as []*pb.Allocation) error {
		if as[0].GetNodeId() != vd.n2.GetId() {
			return fmt.Errorf("plugin alloc to run on %s, want n2", as[0].GetNodeId())
		}
		return nil
	})
	vd.report(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, "plug")
	vd.waitDrained()
}

// TestDrainDeadlineStopsEverythingPluginsLast: the users never stop; at
// the drain's deadline the system allocs and the plugins go at once, the
// plugins in a later write than the rest.
func TestDrainDeadlineStopsEverythingPluginsLast(t *testing.T) {
	vd := newVolumeDrain(t, pluginJob("plug", pb.JobType_JOB_TYPE_SYSTEM), pluginJob("svcplug", pb.JobType_JOB_TYPE_SERVICE),
		volumeJob("db", 1), serviceJob("web", 1), systemJob("logs"))
	vd.drain(2 * time.Second)
	vd.waitMoving("db", "web")
	idx, _ := vd.s.State().LatestIndex()
	vd.heldAfter(idx, "before the deadline, db running", "plug", "svcplug", "logs")

	vd.tc.clock.Advance(2 * time.Second)
	vd.waitMoving("plug", "svcplug", "logs")
	// The drainer's evaluations carry the order of its writes.
	drainEval := func(job string) *pb.Evaluation {
		evs, err := vd.s.State().EvalsByJob(nil, job)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.GetTriggeredBy() == pb.EvalTrigger_EVAL_TRIGGER_NODE_DRAIN && e.GetNodeId() == vd.n1.GetId() {
				return e
			}
		}
		t.Fatalf("job %s has no drain evaluation for n1: %v", job, evs)
		return nil
	}
	logs, plug, svcplug := drainEval("logs"), drainEval("plug"), drainEval("svcplug")
	if plug.GetCreateIndex() != svcplug.GetCreateIndex() || plug.GetCreateIndex() <= logs.GetCreateIndex() {
		t.Fatalf("drain writes at index logs %d, plug %d, svcplug %d: want both plugins in one write after the rest",
			logs.GetCreateIndex(), plug.GetCreateIndex(), svcplug.GetCreateIndex())
	}
	if c := vd.claimOf("db"); c.GetState() >= pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
		t.Fatalf("db's claim %s: want the plugins gone at the deadline with vol1 still claimed", c.GetState())
	}
	vd.report(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, "db", "web", "plug", "svcplug", "logs")
	vd.waitDrained()
}
