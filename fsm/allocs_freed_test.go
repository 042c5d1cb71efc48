package fsm_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// scanFreed is what the blocked-evaluation feed computed before
// AllocsFreedIndex, reading every alloc: the latest modify index of a
// terminal alloc or alloc modify index of a live one. A restore rebuilds
// the mark as this; between restores the mark leaves out a client's
// writes of an alloc terminal already (modelFreed).
func scanFreed(t *testing.T, st stateReader) uint64 {
	t.Helper()
	allocs, _, err := st.AllocsPage(nil, "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var freed uint64
	for _, a := range allocs {
		if rules.AllocTerminal(a) {
			freed = max(freed, a.GetModifyIndex())
		} else {
			freed = max(freed, a.GetAllocModifyIndex())
		}
	}
	return freed
}

// modelFreed is the mark as the applies keep it, from the allocs and when
// each became terminal (became: at or after the index recorded): the
// latest index at which one became terminal or the servers changed one.
func modelFreed(t *testing.T, st stateReader, became map[string]uint64) uint64 {
	t.Helper()
	allocs, _, err := st.AllocsPage(nil, "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var freed uint64
	for _, a := range allocs {
		freed = max(freed, a.GetAllocModifyIndex())
		if rules.AllocTerminal(a) {
			freed = max(freed, became[a.GetId()])
		}
	}
	return freed
}

func freedIndex(t *testing.T, st *fsm.StateStore, ws memdb.WatchSet) uint64 {
	t.Helper()
	got, err := st.AllocsFreedIndex(ws)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestAllocsFreedIndex: a placement and a server stop move the mark to
// their index; a client update that leaves an alloc running moves nothing
// and fires no watch; one that makes it terminal moves it and fires the
// watch; a GC does not lower it; a restore rebuilds it from the allocs.
func TestAllocsFreedIndex(t *testing.T) {
	f := fsm.New(testLogger(t))
	applyOK(t, f, 1, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n1", Status: pb.NodeStatus_NODE_STATUS_READY,
		Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1000}}})
	applyOK(t, f, 2, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Type: pb.JobType_JOB_TYPE_SERVICE}})
	st := f.State()
	if got := freedIndex(t, st, nil); got != 0 {
		t.Fatalf("no allocs: freed at %d, want 0", got)
	}
	res := &pb.AllocResources{CpuMhz: 100, MemoryMb: 100}
	applyOK(t, f, 3, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e", JobId: "web", Allocs: []*pb.Allocation{
		{Id: "a1", NodeId: "n1", JobId: "web", Resources: res}, {Id: "a2", NodeId: "n1", JobId: "web", Resources: res}}}})
	if got := freedIndex(t, st, nil); got != 3 {
		t.Fatalf("after a placement at 3: freed at %d", got)
	}

	ws := memdb.NewWatchSet()
	freedIndex(t, st, ws)
	applyOK(t, f, 4, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1",
		Updates: []*pb.AllocClientUpdate{{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING}}})
	if got := freedIndex(t, st, nil); got != 3 || fired(ws) {
		t.Fatalf("after a client's running update: freed at %d (want 3), watch fired %v (want false)", got, fired(ws))
	}
	applyOK(t, f, 5, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1",
		Updates: []*pb.AllocClientUpdate{{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED}}})
	if got := freedIndex(t, st, nil); got != 5 || !fired(ws) {
		t.Fatalf("after the client failed a1 at 5: freed at %d, watch fired %v", got, fired(ws))
	}
	applyOK(t, f, 6, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e", JobId: "web", Stops: []*pb.AllocStop{{AllocId: "a2"}}}})
	if got := freedIndex(t, st, nil); got != 6 || got != scanFreed(t, st) {
		t.Fatalf("after a server stop at 6: freed at %d, scan says %d", got, scanFreed(t, st))
	}

	g := fsm.New(testLogger(t))
	if err := restoreBytes(g, snapshotBytes(t, f)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := freedIndex(t, g.State(), nil); got != 6 {
		t.Fatalf("restored: freed at %d, want 6", got)
	}
	applyOK(t, f, 7, fsm.GC, &pb.GCCommand{AllocIds: []string{"a2"}})
	if got := freedIndex(t, st, nil); got != 6 {
		t.Fatalf("after a2's GC: freed at %d, want 6 (a mark)", got)
	}
}

// TestAllocsFreedIndexCoversTheScan drives random plans, client updates,
// transitions and GC through batches and single applies: the mark is never
// below the index at which an alloc became terminal or the servers last
// changed one (a blocked evaluation such a change may make room for, the
// mark wakes), and a restore equals the scan.
func TestAllocsFreedIndexCoversTheScan(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 25))
			f := fsm.New(testLogger(t))
			applyOK(t, f, 1, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n1", Status: pb.NodeStatus_NODE_STATUS_READY,
				Resources: &pb.NodeResources{CpuMhz: 100000, MemoryMb: 100000}}})
			applyOK(t, f, 2, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Type: pb.JobType_JOB_TYPE_SERVICE}})
			index, next := uint64(2), 0
			var placed []string
			command := func() []byte {
				switch k := rng.IntN(10); {
				case k < 3 || len(placed) == 0:
					next++
					id := fmt.Sprintf("a%03d", next)
					placed = append(placed, id)
					return mustEncode(t, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e", JobId: "web", Allocs: []*pb.Allocation{
						{Id: id, NodeId: "n1", JobId: "web", Resources: &pb.AllocResources{CpuMhz: 10, MemoryMb: 10}}}}})
				case k < 4:
					return mustEncode(t, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e", JobId: "web",
						Stops: []*pb.AllocStop{{AllocId: placed[rng.IntN(len(placed))]}}}})
				case k < 8:
					status := []pb.AllocClientStatus{pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING,
						pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED}[rng.IntN(4)]
					return mustEncode(t, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1",
						Updates: []*pb.AllocClientUpdate{{AllocId: placed[rng.IntN(len(placed))], ClientStatus: status}}})
				case k < 9:
					return mustEncode(t, fsm.AllocDesiredTransition, &pb.AllocDesiredTransitionCommand{
						Allocs: map[string]*pb.DesiredTransition{placed[rng.IntN(len(placed))]: {Migrate: true}}})
				default:
					return mustEncode(t, fsm.GC, &pb.GCCommand{AllocIds: []string{placed[rng.IntN(len(placed))]}})
				}
			}
			became := map[string]uint64{}
			for step := range 80 {
				first := index + 1
				var logs []*raft.Log
				for range 1 + rng.IntN(5) {
					index++
					logs = append(logs, &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: command()})
				}
				if rng.IntN(2) == 0 {
					f.ApplyBatch(logs)
				} else {
					for _, l := range logs {
						f.ApplyLog(l)
					}
				}
				allocs, _, err := f.State().AllocsPage(nil, "", 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range allocs {
					if _, ok := became[a.GetId()]; !ok && rules.AllocTerminal(a) {
						became[a.GetId()] = first
					}
				}
				got, model := freedIndex(t, f.State(), nil), modelFreed(t, f.State(), became)
				if allocsIdx, _ := f.State().Index(fsm.TableAllocs); got < model || got > allocsIdx {
					t.Fatalf("step %d: freed at %d, model %d, allocs table at %d", step, got, model, allocsIdx)
				}
			}
			g := fsm.New(testLogger(t))
			if err := restoreBytes(g, snapshotBytes(t, f)); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if got, scan := freedIndex(t, g.State(), nil), scanFreed(t, g.State()); got != scan || scan == 0 {
				t.Fatalf("restored: freed at %d, scan %d", got, scan)
			}
		})
	}
}
