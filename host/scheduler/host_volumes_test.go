package scheduler_test

import (
	"strings"
	"testing"

	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

// hostVolumeJob is a job whose group asks for the host volume source as
// group volume "data".
func hostVolumeJob(typ pb.JobType, count int32, source string, readOnly bool) *pb.Job {
	job := schedtest.Job("j", typ, count)
	for _, g := range job.GetGroups() {
		g.Volumes = map[string]*pb.VolumeRequest{"data": {Name: "data", Type: "host", Source: source, ReadOnly: readOnly}}
	}
	return job
}

func hostVolumeNode(id, name string, readOnly bool) *pb.Node {
	n := schedtest.Node(id)
	n.HostVolumes = map[string]*pb.HostVolumeInfo{name: {Path: "/srv/" + name, ReadOnly: readOnly}}
	return n
}

func TestHostVolumePlacesOnlyWhereItIs(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1", "n3")
	st.AddNode(hostVolumeNode("n2", "fast", false))
	job := hostVolumeJob(pb.JobType_JOB_TYPE_SERVICE, 2, "fast", false)
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", placed(res), []string{"j.web[0]@n2", "j.web[1]@n2"})
	if len(res.Plan.GetClaims()) != 0 {
		t.Errorf("a static host volume takes no claim; the plan has %v", res.Plan.GetClaims())
	}
}

func TestHostVolumeMissingBlocksAndSaysWhy(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1")
	st.AddNode(hostVolumeNode("n2", "slow", false))
	job := hostVolumeJob(pb.JobType_JOB_TYPE_SERVICE, 1, "fast", false)
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", placed(res), []string(nil))
	if res.Eval.GetBlockedEval() == "" {
		t.Fatal("no blocked evaluation for a group no node can take")
	}
	equal(t, "filtered", filtered(res, "web"), map[string]int32{`volume "data": no host volume "fast" on the node`: 2})
}

func TestHostVolumeReadOnlyRefusesAWriter(t *testing.T) {
	st := schedtest.NewState()
	st.AddNode(hostVolumeNode("ro", "fast", true))
	writer := hostVolumeJob(pb.JobType_JOB_TYPE_SERVICE, 1, "fast", false)
	st.AddJob(writer)
	res := run(t, st, schedtest.Eval("e1", writer))
	equal(t, "placements", placed(res), []string(nil))
	equal(t, "filtered", filtered(res, "web"),
		map[string]int32{`volume "data": host volume "fast" is read-only and the group writes to it (read_only = false)`: 1})

	reader := hostVolumeJob(pb.JobType_JOB_TYPE_SERVICE, 1, "fast", true)
	reader.Id = "r"
	st.AddJob(reader)
	res = run(t, st, schedtest.Eval("e2", reader))
	equal(t, "reader placements", placed(res), []string{"r.web[0]@ro"})
}

func TestHostVolumeSystemJobSkipsNodesWithout(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1")
	st.AddNode(hostVolumeNode("n2", "fast", false))
	job := hostVolumeJob(pb.JobType_JOB_TYPE_SYSTEM, 0, "fast", false)
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", nodesOf(res), map[string]int{"n2": 1})
}

// dynamicNode is a node whose client fingerprints dynamic host volume id
// under name, recorded in st with access mode mode.
func dynamicNode(st *schedtest.State, nodeID, name, id string, mode pb.VolumeAccessMode) {
	n := schedtest.Node(nodeID)
	n.HostVolumes = map[string]*pb.HostVolumeInfo{name: {Path: "/var/lib/berth/host_volumes/" + id, Id: id}}
	st.AddNode(n)
	st.AddHostVolume(&pb.HostVolume{Id: id, Name: name, NodeId: nodeID, State: pb.HostVolumeState_HOST_VOLUME_STATE_READY,
		Capabilities: []*pb.VolumeCapability{{AccessMode: mode, AttachmentMode: fs}}})
}

// A dynamic host volume places on its node with a claim that names it and
// carries the host request; a single-node-single-writer one takes one
// alloc, the other waits blocked, and is placed once the first stopped
// and its claim was freed.
func TestDynamicHostVolumeClaimsLikeCSI(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1")
	dynamicNode(st, "n2", "data", "hv-1", snsw)
	job := hostVolumeJob(pb.JobType_JOB_TYPE_SERVICE, 2, "data", false)
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", placed(res), []string{"j.web[0]@n2"})
	equal(t, "claims", claims(t, res), []string{"hv-1:j.web[0]@n2:write"})
	if c := res.Plan.GetClaims()[0]; c.GetRequest().GetType() != "host" || c.GetAccessMode() != snsw {
		t.Errorf("claim %v: want the host request and single-node-single-writer", c)
	}
	equal(t, "filtered", filtered(res, "web"), map[string]int32{
		`volume "data": no host volume "data" on the node`: 1,
		`volume "data" (host volume "data", hv-1): no free claim (single-node-single-writer, claimed by alloc "e1-1" on node "n2", reserved)`: 1,
	})
	if res.Eval.GetBlockedEval() == "" {
		t.Fatal("the second alloc's evaluation did not block")
	}
	st.Apply(res.Plan)

	// Still held: the blocked evaluation places nothing.
	blocked := schedtest.Eval("e2", job)
	blocked.TriggeredBy = pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS
	res = run(t, st, blocked)
	equal(t, "placements while held", placed(res), []string(nil))

	// The first alloc stops on its client and the state machine frees its
	// claim: the second is placed.
	for _, c := range mustClaims(t, st, "hv-1") {
		st.FreeClaim(c.GetId())
	}
	res = run(t, st, schedtest.Eval("e3", job))
	equal(t, "placements once freed", placed(res), []string{"j.web[1]@n2"})
}

// A read-only request shares a single-node-reader-only volume; a writer
// cannot use it.
func TestDynamicHostVolumeAccessModes(t *testing.T) {
	st := schedtest.NewState()
	dynamicNode(st, "n1", "ref", "hv-ro", snro)
	writer := hostVolumeJob(pb.JobType_JOB_TYPE_SERVICE, 1, "ref", false)
	st.AddJob(writer)
	res := run(t, st, schedtest.Eval("e1", writer))
	equal(t, "writer placements", placed(res), []string(nil))
	equal(t, "filtered", filtered(res, "web"), map[string]int32{
		`volume "data" (host volume "ref", hv-ro): the volume has no a writable capability (it offers single-node-reader-only/file-system)`: 1,
	})
	reader := hostVolumeJob(pb.JobType_JOB_TYPE_SERVICE, 2, "ref", true)
	reader.Id = "r"
	st.AddJob(reader)
	res = run(t, st, schedtest.Eval("e2", reader))
	equal(t, "reader placements", placed(res), []string{"r.web[0]@n1", "r.web[1]@n1"})
}

func mustClaims(t *testing.T, st *schedtest.State, vol string) []*pb.Claim {
	t.Helper()
	cs, err := st.ClaimsByVolume(vol)
	if err != nil || len(cs) == 0 {
		t.Fatalf("claims of %s: %v, %v", vol, cs, err)
	}
	return cs
}

// Two group volumes naming one dynamic host volume make one claim (an
// alloc holds one claim per volume), writing when either writes; the plan
// applies. Different access modes for it are refused with both names.
func TestDynamicHostVolumeTwoNamesOneClaim(t *testing.T) {
	st := schedtest.NewState()
	dynamicNode(st, "n1", "data", "hv-1", snsw)
	job := hostVolumeJob(pb.JobType_JOB_TYPE_SERVICE, 1, "data", true)
	job.Groups[0].Volumes["data2"] = &pb.VolumeRequest{Name: "data2", Type: "host", Source: "data"}
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", placed(res), []string{"j.web[0]@n1"})
	equal(t, "claims", claims(t, res), []string{"hv-1:j.web[0]@n1:write"})
	st.Apply(res.Plan)

	job2 := hostVolumeJob(pb.JobType_JOB_TYPE_SERVICE, 1, "data", false)
	job2.Id = "k"
	job2.Groups[0].Volumes["data"].AccessMode = "single-node-single-writer"
	job2.Groups[0].Volumes["data2"] = &pb.VolumeRequest{Name: "data2", Type: "host", Source: "data", AccessMode: "single-node-reader-only"}
	st.AddJob(job2)
	res = run(t, st, schedtest.Eval("e2", job2))
	equal(t, "conflicting placements", placed(res), []string(nil))
	if len(filtered(res, "web")) == 0 {
		t.Error("no refusal recorded")
	}
	for why := range filtered(res, "web") {
		if !strings.Contains(why, `group volumes "data" and "data2" name it with access modes`) {
			t.Errorf("refusal %q", why)
		}
	}
}
