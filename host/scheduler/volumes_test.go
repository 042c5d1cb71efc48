package scheduler_test

import (
	"fmt"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

const (
	snw  = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER
	snsw = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER
	snro = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_READER_ONLY
	mnro = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY
	mnsw = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_SINGLE_WRITER
	mnmw = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER
	fs   = pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM
)

// pluginNodes adds ready nodes running a healthy node instance of plugin.
func pluginNodes(st *schedtest.State, plugin string, ids ...string) {
	for _, id := range ids {
		st.AddNode(schedtest.WithNodePlugin(schedtest.Node(id), plugin))
	}
}

// claims returns "volume:alloc-name@node:mode" for the plan's claims,
// sorted, checking each names an alloc the plan places on that node.
func claims(t *testing.T, res *scheduler.Result) []string {
	t.Helper()
	allocs := map[string]*pb.Allocation{}
	for _, a := range res.Plan.GetAllocs() {
		allocs[a.GetId()] = a
	}
	var out []string
	ids := map[string]bool{}
	for _, c := range res.Plan.GetClaims() {
		a := allocs[c.GetAllocId()]
		switch {
		case a == nil:
			t.Errorf("claim %s is for alloc %q, which the plan does not place", c.GetId(), c.GetAllocId())
			continue
		case c.GetNodeId() != a.GetNodeId():
			t.Errorf("claim %s is on node %q, its alloc on %q", c.GetId(), c.GetNodeId(), a.GetNodeId())
		case c.GetId() == "" || ids[c.GetId()]:
			t.Errorf("claim ID %q is empty or used twice", c.GetId())
		}
		ids[c.GetId()] = true
		mode := "write"
		if c.GetMode() == pb.ClaimMode_CLAIM_MODE_READ {
			mode = "read"
		}
		out = append(out, fmt.Sprintf("%s:%s@%s:%s", c.GetVolumeId(), a.GetName(), a.GetNodeId(), mode))
	}
	sort.Strings(out)
	return out
}

// filtered returns the failed group's constraint_filtered counts.
func filtered(res *scheduler.Result, group string) map[string]int32 {
	return res.Eval.GetFailedTgAllocs()[group].GetConstraintFiltered()
}

func TestVolumeClaimTravelsWithItsPlacement(t *testing.T) {
	st := schedtest.NewState()
	pluginNodes(st, "hostpath", "n1", "n2")
	st.AddVolume(schedtest.Volume("vol1", "hostpath", snw))
	job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1), "data", "vol1")
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	if len(res.Plan.GetAllocs()) != 1 || len(res.Plan.GetClaims()) != 1 {
		t.Fatalf("plan has %d allocs and %d claims, want 1 and 1", len(res.Plan.GetAllocs()), len(res.Plan.GetClaims()))
	}
	a, c := res.Plan.GetAllocs()[0], res.Plan.GetClaims()[0]
	want := &pb.Claim{
		Id: "e1-2", VolumeId: "vol1", AllocId: a.GetId(), NodeId: a.GetNodeId(),
		Mode: pb.ClaimMode_CLAIM_MODE_WRITE, AccessMode: snw, AttachmentMode: fs,
		State: pb.ClaimState_CLAIM_STATE_RESERVED, CreatedAt: now,
		// What the client publishes with, so the claim needs no job.
		Request: &pb.VolumeRequest{Name: "data", Type: "csi", Source: "vol1"},
	}
	if !proto.Equal(c, want) {
		t.Errorf("claim:\n got %v\nwant %v", c, want)
	}
	equal(t, "eval status", res.Eval.GetStatus(), pb.EvalStatus_EVAL_STATUS_COMPLETE)
	// The same inputs plan the same, claims included.
	again := run(t, st, schedtest.Eval("e1", job))
	if !proto.Equal(res.Plan, again.Plan) {
		t.Errorf("two runs on one snapshot differ:\n%v\n%v", res.Plan, again.Plan)
	}
}

// TestVolumeFeasibilityRules: each rule keeps the alloc off the nodes it
// refuses and names the volume in the metric when no node is left.
func TestVolumeFeasibilityRules(t *testing.T) {
	type setup func(st *schedtest.State)
	withInfo := func(id string, edit func(*pb.CSIPluginInfo)) setup {
		return func(st *schedtest.State) {
			n := schedtest.WithNodePlugin(schedtest.Node(id), "p")
			edit(n.CsiNodePlugins["p"])
			st.AddNode(n)
		}
	}
	other := schedtest.Job("other", pb.JobType_JOB_TYPE_SERVICE, 1)
	cases := []struct {
		name   string
		setups []setup
		volume *pb.Volume
		want   string // placement, or "" for none
		reason string // the reason counted when some node is refused
	}{
		{
			name: "no node instance",
			setups: []setup{
				func(st *schedtest.State) { st.AddNode(schedtest.Node("n1")) },
				func(st *schedtest.State) { pluginNodes(st, "p", "n2") },
			},
			volume: schedtest.Volume("v", "p", snw),
			want:   "j.web[0]@n2",
			reason: `volume "v": no node instance of plugin "p"`,
		},
		{
			name: "unhealthy node plugin",
			setups: []setup{
				withInfo("n1", func(i *pb.CSIPluginInfo) { i.Healthy = false }),
			},
			volume: schedtest.Volume("v", "p", snw),
			reason: `volume "v": node plugin "p" is unhealthy`,
		},
		{
			name:   "volume not registered",
			setups: []setup{func(st *schedtest.State) { pluginNodes(st, "p", "n1") }},
			reason: `volume "v": no such volume is registered`,
		},
		{
			name:   "plugin not schedulable",
			setups: []setup{func(st *schedtest.State) { pluginNodes(st, "p", "n1") }},
			volume: func() *pb.Volume { v := schedtest.Volume("v", "p", snw); v.Schedulable = false; return v }(),
			reason: `volume "v": plugin "p" is not schedulable`,
		},
		{
			name: "max volumes",
			setups: []setup{
				withInfo("n1", func(i *pb.CSIPluginInfo) { i.NodeInfo.MaxVolumes = 1 }),
				withInfo("n2", func(i *pb.CSIPluginInfo) { i.NodeInfo.MaxVolumes = 2 }),
				func(st *schedtest.State) {
					// n1 and n2 hold one volume of p each.
					for _, n := range []string{"n1", "n2"} {
						st.AddVolume(schedtest.Volume("held-"+n, "p", snw))
						a := schedtest.Alloc("o-"+n, other, 0, n)
						st.AddAlloc(a)
						st.AddClaim(schedtest.Claim("c-"+n, "held-"+n, a, snw))
					}
				},
			},
			volume: schedtest.Volume("v", "p", snw),
			want:   "j.web[0]@n2",
			reason: `volume "v": node plugin "p" holds its max of 1 volumes`,
		},
		{
			name: "topology",
			setups: []setup{
				withInfo("n1", func(i *pb.CSIPluginInfo) { i.NodeInfo.AccessibleTopology = map[string]string{"zone": "b"} }),
				withInfo("n2", func(i *pb.CSIPluginInfo) {
					i.NodeInfo.AccessibleTopology = map[string]string{"zone": "a", "rack": "r1"}
				}),
			},
			volume: func() *pb.Volume {
				v := schedtest.Volume("v", "p", snw)
				v.AccessibleTopology = []*pb.Topology{{Segments: map[string]string{"zone": "a"}}}
				return v
			}(),
			want:   "j.web[0]@n2",
			reason: `volume "v": not accessible from the node's topology`,
		},
		{
			name: "required topology of a volume that reports none",
			setups: []setup{
				withInfo("n1", func(i *pb.CSIPluginInfo) { i.NodeInfo.AccessibleTopology = map[string]string{"zone": "b"} }),
			},
			volume: func() *pb.Volume {
				v := schedtest.Volume("v", "p", snw)
				v.TopologyRequest = &pb.TopologyRequest{Required: []*pb.Topology{{Segments: map[string]string{"zone": "a"}}}}
				return v
			}(),
			reason: `volume "v": not accessible from the node's topology`,
		},
		{
			// The state machine refuses a claim beside a detaching
			// attachment; the scheduler must not pick the node.
			name: "detaching from the node",
			setups: []setup{
				func(st *schedtest.State) { pluginNodes(st, "p", "n1", "n2") },
				func(st *schedtest.State) {
					st.AddAttachment(&pb.Attachment{VolumeId: "v", NodeId: "n1", PluginId: "p",
						State: pb.AttachmentState_ATTACHMENT_STATE_DETACHING})
					st.AddAttachment(&pb.Attachment{VolumeId: "v", NodeId: "n2", PluginId: "p",
						State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED})
				},
			},
			volume: schedtest.Volume("v", "p", snw),
			want:   "j.web[0]@n2",
			reason: `volume "v": the volume is detaching from the node (controller unpublish under way)`,
		},
		{
			name: "detaching from the only node",
			setups: []setup{
				func(st *schedtest.State) { pluginNodes(st, "p", "n1") },
				func(st *schedtest.State) {
					st.AddAttachment(&pb.Attachment{VolumeId: "v", NodeId: "n1", PluginId: "p",
						State: pb.AttachmentState_ATTACHMENT_STATE_DETACHING})
				},
			},
			volume: schedtest.Volume("v", "p", snw),
			reason: `volume "v": the volume is detaching from the node (controller unpublish under way)`,
		},
		{
			name:   "no capability for a writer",
			setups: []setup{func(st *schedtest.State) { pluginNodes(st, "p", "n1") }},
			volume: schedtest.Volume("v", "p", mnro),
			reason: `volume "v": the volume has no a writable capability (it offers multi-node-reader-only/file-system)`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := schedtest.NewState()
			for _, s := range tc.setups {
				s(st)
			}
			if tc.volume != nil {
				st.AddVolume(tc.volume)
			}
			job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1), "v", "v")
			st.AddJob(job)
			res := run(t, st, schedtest.Eval("e1", job))
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			equal(t, "placements", placed(res), want)
			if tc.want == "" {
				equal(t, "reasons", filtered(res, "web"), map[string]int32{tc.reason: 1})
				if len(res.FollowUps) != 1 || res.FollowUps[0].GetStatus() != pb.EvalStatus_EVAL_STATUS_BLOCKED {
					t.Errorf("follow-ups %v, want one blocked eval", res.FollowUps)
				}
				return
			}
			equal(t, "claims", len(res.Plan.GetClaims()), 1)
			// The refused node is reported when the group fails: count=2 of a
			// single-node volume shows both the rule and the claim.
			if tc.reason != "" {
				job2 := proto.Clone(job).(*pb.Job)
				job2.Groups[0].Count = 2
				job2.Groups[0].Volumes["v"].AccessMode = "single-node-writer"
				st.AddJob(job2)
				res2 := run(t, st, schedtest.Eval("e2", job2))
				if got := filtered(res2, "web")[tc.reason]; got != 1 {
					t.Errorf("reason %q counted %d times in %v, want 1", tc.reason, got, filtered(res2, "web"))
				}
			}
		})
	}
}

// TestVolumeInPlanAccounting: two allocs of one group need one
// single-node-writer volume: one is placed, the other blocked with a
// reason naming the volume and the claim this very plan reserves.
func TestVolumeInPlanAccounting(t *testing.T) {
	st := schedtest.NewState()
	pluginNodes(st, "p", "n1", "n2", "n3")
	st.AddVolume(schedtest.Volume("vol1", "p", snw))
	job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 2), "data", "vol1")
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	if len(res.Plan.GetAllocs()) != 1 {
		t.Fatalf("placed %v, want exactly one alloc", placed(res))
	}
	a := res.Plan.GetAllocs()[0]
	equal(t, "claims", claims(t, res), []string{"vol1:j.web[0]@" + a.GetNodeId() + ":write"})
	reason := fmt.Sprintf(`volume "vol1" (group volume "data"): no free claim (single-node-writer, claimed by alloc %q on node %q, reserved)`,
		a.GetId(), a.GetNodeId())
	equal(t, "reasons", filtered(res, "web"), map[string]int32{reason: 3})
	equal(t, "queued", res.Eval.GetQueuedAllocations()["web"], int32(1))
	if len(res.FollowUps) != 1 || res.FollowUps[0].GetStatus() != pb.EvalStatus_EVAL_STATUS_BLOCKED {
		t.Fatalf("follow-ups %v, want one blocked eval", res.FollowUps)
	}

	// A second plan (the blocked eval run again) sees the stored claim.
	st.Apply(res.Plan)
	blocked := res.FollowUps[0]
	res2 := run(t, st, blocked)
	equal(t, "placements after", placed(res2), []string(nil))
	reason2 := fmt.Sprintf(`volume "vol1" (group volume "data"): no free claim (single-node-writer, claimed by alloc %q on node %q, ready)`,
		a.GetId(), a.GetNodeId())
	equal(t, "reasons after", filtered(res2, "web"), map[string]int32{reason2: 3})
	equal(t, "re-blocked", res2.Eval.GetStatus(), pb.EvalStatus_EVAL_STATUS_BLOCKED)
}

// TestVolumeModesShareAVolume: a multi-writer volume takes every alloc;
// single-node modes keep them on the node that holds it.
func TestVolumeModesShareAVolume(t *testing.T) {
	for _, tc := range []struct {
		mode     pb.VolumeAccessMode
		readOnly bool
		placed   int
		oneNode  bool
	}{
		{mode: mnmw, placed: 3},
		{mode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER, placed: 3, oneNode: true},
		{mode: snro, readOnly: true, placed: 3, oneNode: true},
		{mode: mnro, readOnly: true, placed: 3},
		{mode: snsw, placed: 1},
		{mode: mnsw, placed: 1},
	} {
		t.Run(fmt.Sprintf("%v-ro=%v", tc.mode, tc.readOnly), func(t *testing.T) {
			st := schedtest.NewState()
			pluginNodes(st, "p", "n1", "n2", "n3")
			st.AddVolume(schedtest.Volume("v", "p", tc.mode))
			job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 3), "v", "v")
			job.Groups[0].Volumes["v"].ReadOnly = tc.readOnly
			st.AddJob(job)
			res := run(t, st, schedtest.Eval("e1", job))
			equal(t, "placed", len(res.Plan.GetAllocs()), tc.placed)
			equal(t, "claims", len(res.Plan.GetClaims()), tc.placed)
			if tc.oneNode {
				equal(t, "nodes used", len(nodesOf(res)), 1)
			} else if tc.placed == 3 {
				equal(t, "nodes used", len(nodesOf(res)), 3)
			}
			for _, c := range res.Plan.GetClaims() {
				want := pb.ClaimMode_CLAIM_MODE_WRITE
				if tc.readOnly {
					want = pb.ClaimMode_CLAIM_MODE_READ
				}
				if c.GetMode() != want || c.GetAccessMode() != tc.mode {
					t.Errorf("claim %v, want mode %v through %v", c, want, tc.mode)
				}
			}
		})
	}
}

// TestVolumeReadOnlyBesideAWriter: a read_only request is a read claim: on
// a multi-node-single-writer volume whose writer another job holds it is
// placed anywhere; a writer is refused.
func TestVolumeReadOnlyBesideAWriter(t *testing.T) {
	st := schedtest.NewState()
	pluginNodes(st, "p", "n1", "n2")
	st.AddVolume(schedtest.Volume("v", "p", mnsw))
	writer := schedtest.Job("writer", pb.JobType_JOB_TYPE_SERVICE, 1)
	wa := schedtest.Alloc("w1", writer, 0, "n1")
	st.AddAlloc(wa)
	st.AddClaim(schedtest.Claim("cw", "v", wa, mnsw))

	readers := schedtest.WithVolume(schedtest.Job("readers", pb.JobType_JOB_TYPE_SERVICE, 2), "v", "v")
	readers.Groups[0].Volumes["v"].ReadOnly = true
	st.AddJob(readers)
	res := run(t, st, schedtest.Eval("e1", readers))
	equal(t, "reader claims", claims(t, res), []string{"v:readers.web[0]@n1:read", "v:readers.web[1]@n2:read"})

	another := schedtest.WithVolume(schedtest.Job("another", pb.JobType_JOB_TYPE_SERVICE, 1), "v", "v")
	st.AddJob(another)
	res = run(t, st, schedtest.Eval("e2", another))
	equal(t, "writer placements", placed(res), []string(nil))
	equal(t, "writer reasons", filtered(res, "web"), map[string]int32{
		`volume "v": no free claim (multi-node-single-writer, claimed by alloc "w1" on node "n1", ready)`: 2,
	})
}

// TestVolumeWriterKeptByReadersSaysWho: a multi-node-single-writer
// volume's stopped writer is node-detached but kept while readers on its
// node keep the node's writable attachment; a new writer's blocked
// evaluation names them, so the wait is not a silent one.
func TestVolumeWriterKeptByReadersSaysWho(t *testing.T) {
	st := schedtest.NewState()
	pluginNodes(st, "p", "n1", "n2")
	st.AddVolume(schedtest.Volume("v", "p", mnsw))
	old := schedtest.Job("old", pb.JobType_JOB_TYPE_SERVICE, 1)
	wa := schedtest.Alloc("w1", old, 0, "n1")
	st.AddAlloc(wa)
	cw := schedtest.Claim("cw", "v", wa, mnsw)
	cw.State = pb.ClaimState_CLAIM_STATE_NODE_DETACHED
	st.AddClaim(cw)
	readers := schedtest.Job("readers", pb.JobType_JOB_TYPE_SERVICE, 2)
	for i, id := range []string{"r1", "r2"} {
		ra := schedtest.Alloc(id, readers, int32(i), "n1")
		st.AddAlloc(ra)
		rc := schedtest.Claim("c"+id, "v", ra, mnsw)
		rc.Mode = pb.ClaimMode_CLAIM_MODE_READ
		st.AddClaim(rc)
	}

	writer := schedtest.WithVolume(schedtest.Job("writer", pb.JobType_JOB_TYPE_SERVICE, 1), "v", "v")
	st.AddJob(writer)
	res := run(t, st, schedtest.Eval("e1", writer))
	equal(t, "writer placements", placed(res), []string(nil))
	equal(t, "writer reasons", filtered(res, "web"), map[string]int32{
		`volume "v": no free claim (multi-node-single-writer, claimed by alloc "w1" on node "n1", node-detached; kept until the node's attachment is unpublished, which alloc "r1", alloc "r2" there still use)`: 2,
	})
}

// TestVolumePerAlloc: source "data" with per_alloc claims "data[<index>]";
// an index whose volume is held fails alone, the others are placed.
func TestVolumePerAlloc(t *testing.T) {
	st := schedtest.NewState()
	pluginNodes(st, "p", "n1", "n2")
	for i := range 3 {
		st.AddVolume(schedtest.Volume(fmt.Sprintf("data[%d]", i), "p", snsw))
	}
	other := schedtest.Job("other", pb.JobType_JOB_TYPE_SERVICE, 1)
	oa := schedtest.Alloc("o1", other, 0, "n2")
	st.AddAlloc(oa)
	st.AddClaim(schedtest.Claim("c-o1", "data[1]", oa, snsw))

	job := schedtest.WithVolume(schedtest.Job("db", pb.JobType_JOB_TYPE_SERVICE, 3), "data", "data")
	job.Groups[0].Volumes["data"].PerAlloc = true
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	got := claims(t, res)
	if len(got) != 2 || got[0][:len("data[0]:db.web[0]@")] != "data[0]:db.web[0]@" || got[1][:len("data[2]:db.web[2]@")] != "data[2]:db.web[2]@" {
		t.Errorf("claims %v, want data[0] for index 0 and data[2] for index 2", got)
	}
	equal(t, "reasons", filtered(res, "web"), map[string]int32{
		`volume "data[1]" (group volume "data"): no free claim (single-node-single-writer, claimed by alloc "o1" on node "n2", ready)`: 2,
	})
	equal(t, "queued", res.Eval.GetQueuedAllocations()["web"], int32(1))
	equal(t, "volumes watched", scheduler.GroupVolumeIDs(job.Groups[0]), []string{"data[0]", "data[1]", "data[2]"})
}

// TestVolumeLostAllocReplacedOnceItsClaimIsFreed: the replacement of a
// lost single-writer alloc waits, blocked, while the old claim holds the
// volume (releasing counts), and is placed once it is freed.
func TestVolumeLostAllocReplacedOnceItsClaimIsFreed(t *testing.T) {
	st := schedtest.NewState()
	pluginNodes(st, "p", "n1", "n2")
	n1, _ := st.Node("n1")
	n1.Status = pb.NodeStatus_NODE_STATUS_DOWN
	st.AddVolume(schedtest.Volume("v", "p", snw))
	job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1), "v", "v")
	st.AddJob(job)
	old := schedtest.Alloc("a1", job, 0, "n1")
	st.AddAlloc(old)
	st.AddClaim(schedtest.Claim("c1", "v", old, snw))

	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "stops", stops(res), []string{"a1:STOP:LOST"})
	equal(t, "placements", placed(res), []string(nil))
	equal(t, "reasons", filtered(res, "web"), map[string]int32{
		`volume "v": no free claim (single-node-writer, claimed by alloc "a1" on node "n1", ready)`: 1,
	})
	if len(res.FollowUps) != 1 || res.FollowUps[0].GetStatus() != pb.EvalStatus_EVAL_STATUS_BLOCKED {
		t.Fatalf("follow-ups %v, want one blocked eval", res.FollowUps)
	}
	st.Apply(res.Plan)
	blocked := res.FollowUps[0]

	res = run(t, st, blocked)
	equal(t, "still blocked while releasing", res.Eval.GetStatus(), pb.EvalStatus_EVAL_STATUS_BLOCKED)
	equal(t, "reasons while releasing", filtered(res, "web"), map[string]int32{
		`volume "v": no free claim (single-node-writer, claimed by alloc "a1" on node "n1", releasing)`: 1,
	})

	st.FreeClaim("c1")
	res = run(t, st, blocked)
	equal(t, "placed once freed", placed(res), []string{"j.web[0]@n2"})
	equal(t, "claim", claims(t, res), []string{"v:j.web[0]@n2:write"})
	equal(t, "previous", res.Plan.GetAllocs()[0].GetPreviousAllocation(), "a1")
	equal(t, "eval", res.Eval.GetStatus(), pb.EvalStatus_EVAL_STATUS_COMPLETE)
}

// TestVolumeDestructiveUpdateStopsTheWriterFirst: a new version of a
// single-writer job cannot run beside the old one, so the old alloc is
// stopped, the new one waits for the claim, and is placed once it is
// freed. A multi-writer volume is updated as any job (place, then stop).
func TestVolumeDestructiveUpdateStopsTheWriterFirst(t *testing.T) {
	st := schedtest.NewState()
	pluginNodes(st, "p", "n1", "n2")
	st.AddVolume(schedtest.Volume("v", "p", snsw))
	v0 := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1), "v", "v")
	st.AddJobVersion(v0)
	old := schedtest.Alloc("a1", v0, 0, "n1")
	st.AddAlloc(old)
	st.AddClaim(schedtest.Claim("c1", "v", old, snsw))
	v1 := proto.Clone(v0).(*pb.Job)
	v1.Version = 1
	v1.Groups[0].Tasks[0].Env = map[string]string{"V": "1"}
	st.AddJob(v1)

	res := run(t, st, schedtest.Eval("e1", v1))
	equal(t, "stops", stops(res), []string{"a1:STOP:UNSPECIFIED"})
	equal(t, "stop description", res.Plan.GetStops()[0].GetDesiredDescription(), scheduler.DescUpdatedAwaitingClaim)
	equal(t, "placements", placed(res), []string(nil))
	equal(t, "claims", len(res.Plan.GetClaims()), 0)
	if len(res.FollowUps) != 1 || res.FollowUps[0].GetStatus() != pb.EvalStatus_EVAL_STATUS_BLOCKED {
		t.Fatalf("follow-ups %v, want one blocked eval", res.FollowUps)
	}
	st.Apply(res.Plan)
	st.FreeClaim("c1")
	res = run(t, st, res.FollowUps[0])
	got := placed(res)
	if len(got) != 1 || got[0][:len("j.web[0]@")] != "j.web[0]@" {
		t.Fatalf("placed %v after the claim was freed, want j.web[0]", got)
	}
	equal(t, "version", res.Plan.GetAllocs()[0].GetJobVersion(), uint64(1))
	equal(t, "claims", len(res.Plan.GetClaims()), 1)

	// Multi-writer: the old alloc keeps running until its replacement is
	// placed, beside it.
	st2 := schedtest.NewState()
	pluginNodes(st2, "p", "n1", "n2")
	st2.AddVolume(schedtest.Volume("v", "p", mnmw))
	st2.AddJobVersion(v0)
	st2.AddAlloc(old)
	st2.AddClaim(schedtest.Claim("c1", "v", old, mnmw))
	st2.AddJob(v1)
	res = run(t, st2, schedtest.Eval("e1", v1))
	equal(t, "multi-writer stops", stops(res), []string{"a1:STOP:UNSPECIFIED"})
	equal(t, "multi-writer stop description", res.Plan.GetStops()[0].GetDesiredDescription(), scheduler.DescUpdated)
	equal(t, "multi-writer placements", len(res.Plan.GetAllocs()), 1)
}

// TestVolumeInPlaceUpdateKeepsItsClaim: an update in place sends no claim:
// the alloc keeps the one it holds.
func TestVolumeInPlaceUpdateKeepsItsClaim(t *testing.T) {
	st := schedtest.NewState()
	pluginNodes(st, "p", "n1")
	st.AddVolume(schedtest.Volume("v", "p", snsw))
	v0 := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1), "v", "v")
	st.AddJobVersion(v0)
	old := schedtest.Alloc("a1", v0, 0, "n1")
	st.AddAlloc(old)
	st.AddClaim(schedtest.Claim("c1", "v", old, snsw))
	v1 := proto.Clone(v0).(*pb.Job)
	v1.Version = 1
	v1.Meta = map[string]string{"owner": "ops"}
	st.AddJob(v1)
	res := run(t, st, schedtest.Eval("e1", v1))
	equal(t, "in place", res.Plan.GetAnnotations()["web"].GetInPlaceUpdate(), int32(1))
	equal(t, "allocs", len(res.Plan.GetAllocs()), 1)
	equal(t, "claims", len(res.Plan.GetClaims()), 0)
	equal(t, "stops", len(res.Plan.GetStops()), 0)
}

// TestVolumeSystemJob: a system job with a read-only multi-node volume
// gets an alloc and a read claim on every node running the plugin; the
// node without it is reported.
func TestVolumeSystemJob(t *testing.T) {
	st := schedtest.NewState()
	pluginNodes(st, "p", "n1", "n2")
	st.AddNode(schedtest.Node("n3"))
	st.AddVolume(schedtest.Volume("v", "p", mnro))
	job := schedtest.WithVolume(schedtest.Job("sys", pb.JobType_JOB_TYPE_SYSTEM, 1), "v", "v")
	job.Groups[0].Volumes["v"].ReadOnly = true
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "claims", claims(t, res), []string{"v:sys.web[0]@n1:read", "v:sys.web[0]@n2:read"})
	equal(t, "reasons", filtered(res, "web"), map[string]int32{`volume "v": no node instance of plugin "p"`: 1})
}
