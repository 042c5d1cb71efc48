package scheduler_test

import (
	"testing"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

// TestVolumeNamedTwiceMakesOneClaim: group volumes that resolve to one
// volume (a job registered over the API before the jobspec refused it)
// make one claim per alloc: a write claim if any of them writes, read when
// all are read_only; a per_alloc volume merges with the indexed volume it
// resolves to only at that index.
func TestVolumeNamedTwiceMakesOneClaim(t *testing.T) {
	t.Run("read_only beside a writer", func(t *testing.T) {
		st := schedtest.NewState()
		pluginNodes(st, "p", "n1")
		st.AddVolume(schedtest.Volume("v", "p", mnmw))
		job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1), "a", "v")
		job = schedtest.WithVolume(job, "b", "v")
		job.Groups[0].Volumes["a"].ReadOnly = true
		st.AddJob(job)
		res := run(t, st, schedtest.Eval("e1", job))
		equal(t, "claims", claims(t, res), []string{"v:j.web[0]@n1:write"})
		// The request the claim carries to the client is the first name's,
		// writable: "a"'s read_only would publish "b" read-only too.
		req := res.Plan.GetClaims()[0].GetRequest()
		equal(t, "claim's request", [2]any{req.GetName(), req.GetReadOnly()}, [2]any{"a", false})
		if !job.Groups[0].Volumes["a"].GetReadOnly() {
			t.Error("the job's own request was changed")
		}
	})
	t.Run("both read_only", func(t *testing.T) {
		st := schedtest.NewState()
		pluginNodes(st, "p", "n1")
		st.AddVolume(schedtest.Volume("v", "p", mnro))
		job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1), "a", "v")
		job = schedtest.WithVolume(job, "b", "v")
		job.Groups[0].Volumes["a"].ReadOnly = true
		job.Groups[0].Volumes["b"].ReadOnly = true
		st.AddJob(job)
		res := run(t, st, schedtest.Eval("e1", job))
		equal(t, "claims", claims(t, res), []string{"v:j.web[0]@n1:read"})
	})
	t.Run("per_alloc beside an indexed volume", func(t *testing.T) {
		st := schedtest.NewState()
		pluginNodes(st, "p", "n1", "n2")
		for _, id := range []string{"d[0]", "d[1]"} {
			st.AddVolume(schedtest.Volume(id, "p", mnmw))
		}
		job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 2), "data", "d")
		job.Groups[0].Volumes["data"].PerAlloc = true
		job = schedtest.WithVolume(job, "first", "d[0]")
		st.AddJob(job)
		res := run(t, st, schedtest.Eval("e1", job))
		var got []string
		for _, c := range claims(t, res) {
			got = append(got, c[:len(c)-len("@nX:write")]) // the node is the scorer's choice
		}
		equal(t, "claims", got, []string{"d[0]:j.web[0]", "d[0]:j.web[1]", "d[1]:j.web[1]"})
		equal(t, "watched volumes", scheduler.GroupVolumeIDs(job.Groups[0]), []string{"d[0]", "d[1]"})
	})
	t.Run("different access modes", func(t *testing.T) {
		st := schedtest.NewState()
		pluginNodes(st, "p", "n1")
		v := schedtest.Volume("v", "p", mnmw)
		v.Capabilities = append(v.Capabilities, &pb.VolumeCapability{AccessMode: snw,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM})
		st.AddVolume(v)
		job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1), "a", "v")
		job = schedtest.WithVolume(job, "b", "v")
		job.Groups[0].Volumes["a"].AccessMode = "multi-node-multi-writer"
		job.Groups[0].Volumes["b"].AccessMode = "single-node-writer"
		st.AddJob(job)
		res := run(t, st, schedtest.Eval("e1", job))
		equal(t, "placements", placed(res), []string(nil))
		equal(t, "reasons", filtered(res, "web"), map[string]int32{
			`volume "v" (group volumes "a", "b"): group volumes "a" and "b" name it with access modes ` +
				`"multi-node-multi-writer" and "single-node-writer"; one claim has one`: 1,
		})
	})
}

// TestVolumeMaxVolumesCountsTheAllocsOwnAsks: a node plugin's max_volumes
// counts the volumes an alloc's earlier asks add to the node; one volume
// named twice counts once.
func TestVolumeMaxVolumesCountsTheAllocsOwnAsks(t *testing.T) {
	build := func(maxN1, maxN2 int64, sources ...string) (*schedtest.State, *pb.Job) {
		st := schedtest.NewState()
		for id, limit := range map[string]int64{"n1": maxN1, "n2": maxN2} {
			n := schedtest.WithNodePlugin(schedtest.Node(id), "p")
			n.CsiNodePlugins["p"].NodeInfo.MaxVolumes = limit
			st.AddNode(n)
		}
		job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1)
		for i, src := range sources {
			st.AddVolume(schedtest.Volume(src, "p", mnmw))
			job = schedtest.WithVolume(job, string(rune('a'+i)), src)
		}
		st.AddJob(job)
		return st, job
	}

	st, job := build(1, 1, "va", "vb")
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", placed(res), []string(nil))
	equal(t, "reasons", filtered(res, "web"), map[string]int32{
		`volume "vb" (group volume "b"): node plugin "p" holds its max of 1 volumes with the alloc's other volumes of that plugin`: 2,
	})

	st, job = build(1, 2, "va", "vb")
	res = run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", placed(res), []string{"j.web[0]@n2"})

	st, job = build(1, 1, "va", "va")
	res = run(t, st, schedtest.Eval("e1", job))
	equal(t, "claims", claims(t, res), []string{"va:j.web[0]@n1:write"})
}
