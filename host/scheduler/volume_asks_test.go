package scheduler_test

import (
	"testing"

	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

// A group may name one volume under two group volume
// names (the jobspec accepts it: no check on duplicate sources). The
// claims table is unique on (alloc, volume) and PlanApply refuses a plan
// in which an alloc claims a volume twice as a whole (ErrInvalidCommand),
// so the worker can never get such a plan applied: the evaluation fails
// again every minute and the job's other groups are never placed either.
func TestGroupNamingOneVolumeTwiceClaimsItOnce(t *testing.T) {
	st := schedtest.NewState()
	pluginNodes(st, "hostpath", "n1")
	st.AddVolume(schedtest.Volume("vol1", "hostpath", snw))
	job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1), "data", "vol1")
	job = schedtest.WithVolume(job, "logs", "vol1")
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	pairs := map[[2]string]int{}
	for _, c := range res.Plan.GetClaims() {
		pairs[[2]string{c.GetAllocId(), c.GetVolumeId()}]++
	}
	for k, n := range pairs {
		if n > 1 {
			t.Errorf("alloc %q claims volume %q %d times in one plan: PlanApply refuses the whole plan (ErrInvalidCommand)", k[0], k[1], n)
		}
	}
}

// A node plugin's max_volumes is checked ask by ask against the claims
// before the alloc, not against the alloc's own earlier asks: an alloc
// claiming two volumes of one plugin is placed on a node whose plugin
// takes one volume (and PlanApply does not check max_volumes).
func TestMaxVolumesCountsTheAllocsOwnAsks(t *testing.T) {
	st := schedtest.NewState()
	n := schedtest.WithNodePlugin(schedtest.Node("n1"), "p")
	n.CsiNodePlugins["p"].NodeInfo.MaxVolumes = 1
	st.AddNode(n)
	st.AddVolume(schedtest.Volume("va", "p", snw))
	st.AddVolume(schedtest.Volume("vb", "p", snw))
	job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1), "a", "va")
	job = schedtest.WithVolume(job, "b", "vb")
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	if len(res.Plan.GetAllocs()) != 0 {
		t.Errorf("an alloc claiming 2 volumes of plugin p was placed on n1, whose node plugin holds at most 1 (claims %v)", claims(t, res))
	}
}
