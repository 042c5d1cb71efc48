package scheduler_test

import (
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
