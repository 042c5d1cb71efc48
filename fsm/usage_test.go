package fsm_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// usageFromAllocs recomputes node_usage from the allocs the state holds:
// what every node's row must equal.
func usageFromAllocs(t *testing.T, st stateReader) map[string]*pb.NodeUsage {
	t.Helper()
	allocs, _, err := st.AllocsPage(nil, "", 0, nil)
	if err != nil {
		t.Fatalf("AllocsPage: %v", err)
	}
	want := map[string]*pb.NodeUsage{}
	for _, a := range allocs {
		if rules.AllocTerminal(a) {
			continue
		}
		u := want[a.GetNodeId()]
		if u == nil {
			u = &pb.NodeUsage{NodeId: a.GetNodeId()}
			want[a.GetNodeId()] = u
		}
		u.CpuMhz += a.GetResources().GetCpuMhz()
		u.MemoryMb += a.GetResources().GetMemoryMb()
		u.Allocs++
	}
	return want
}

// checkUsage fails unless every node's usage row is the sum over its allocs
// that are not terminal, and a node with none has no row.
func checkUsage(t *testing.T, st *fsm.StateStore, nodes []string, when string) {
	t.Helper()
	want := usageFromAllocs(t, st)
	for _, n := range nodes {
		got, err := st.NodeUsage(nil, n)
		if err != nil {
			t.Fatalf("%s: NodeUsage(%s): %v", when, n, err)
		}
		if !proto.Equal(got, want[n]) {
			t.Fatalf("%s: node %s usage is %v, its allocs sum to %v", when, n, got, want[n])
		}
	}
}

// TestNodeUsageIsTheSumOfAllocs drives random plans (placements, in-place
// updates that resize allocs, stops, refusals for lack of room), client
// updates (running, terminal; sometimes one alloc twice in a command),
// desired transitions and GC through raft batches and single applies, and checks after each that every node's
// usage row equals the sum recomputed from its allocs; and that a restore
// of a snapshot, which does not carry the rows, rebuilds the same rows.
func TestNodeUsageIsTheSumOfAllocs(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 12))
			f := fsm.New(testLogger(t))
			nodes := []string{"n1", "n2", "n3"}
			for i, id := range nodes {
				n := &pb.Node{Id: id, Status: pb.NodeStatus_NODE_STATUS_READY, Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1000}}
				applyOK(t, f, uint64(i+1), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n})
			}
			applyOK(t, f, 4, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Type: pb.JobType_JOB_TYPE_SERVICE}})
			index := uint64(4)
			var placed []*pb.Allocation // every alloc ever placed, with its node
			next := 0
			randomAlloc := func() *pb.Allocation {
				return placed[rng.IntN(len(placed))]
			}
			command := func() []byte {
				switch k := rng.IntN(10); {
				case k < 4 || len(placed) == 0: // placements, sometimes more than fits
					plan := &pb.Plan{EvalId: "e", JobId: "web"}
					for range 1 + rng.IntN(3) {
						next++
						a := &pb.Allocation{Id: fmt.Sprintf("a%03d", next), NodeId: nodes[rng.IntN(len(nodes))], JobId: "web",
							Resources: &pb.AllocResources{CpuMhz: int64(50 + rng.IntN(200)), MemoryMb: int64(50 + rng.IntN(200))}}
						placed = append(placed, a)
						plan.Allocs = append(plan.Allocs, a)
					}
					if rng.IntN(3) == 0 {
						plan.Stops = append(plan.Stops, &pb.AllocStop{AllocId: randomAlloc().GetId()})
					}
					return mustEncode(t, fsm.PlanApply, &pb.PlanApplyCommand{Plan: plan})
				case k < 5: // an in-place update resizing an alloc
					a := randomAlloc()
					u := &pb.Allocation{Id: a.GetId(), NodeId: a.GetNodeId(), JobId: "web",
						Resources: &pb.AllocResources{CpuMhz: int64(rng.IntN(300)), MemoryMb: int64(rng.IntN(300))}}
					return mustEncode(t, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e", JobId: "web", Allocs: []*pb.Allocation{u}}})
				case k < 6: // a stop, or a lost alloc
					s := &pb.AllocStop{AllocId: randomAlloc().GetId()}
					if rng.IntN(2) == 0 {
						s.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_LOST
					}
					return mustEncode(t, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e", JobId: "web", Stops: []*pb.AllocStop{s}}})
				case k < 8: // the client reports
					a := randomAlloc()
					status := []pb.AllocClientStatus{pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING,
						pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED}[rng.IntN(3)]
					ups := []*pb.AllocClientUpdate{{AllocId: a.GetId(), ClientStatus: status}}
					if rng.IntN(2) == 0 {
						// The same alloc twice in one command (a client's
						// retried batch merged with a newer update): the
						// second builds on the row the first wrote.
						ups = append([]*pb.AllocClientUpdate{{AllocId: a.GetId(),
							ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING}}, ups...)
					}
					return mustEncode(t, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: a.GetNodeId(), Updates: ups})
				case k < 9:
					return mustEncode(t, fsm.AllocDesiredTransition, &pb.AllocDesiredTransitionCommand{
						Allocs: map[string]*pb.DesiredTransition{randomAlloc().GetId(): {Migrate: true}}})
				default:
					return mustEncode(t, fsm.GC, &pb.GCCommand{AllocIds: []string{randomAlloc().GetId(), randomAlloc().GetId()}})
				}
			}
			for step := range 60 {
				var logs []*raft.Log
				for range 1 + rng.IntN(6) {
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
				checkUsage(t, f.State(), nodes, fmt.Sprintf("step %d (index %d)", step, index))
			}
			want := usageFromAllocs(t, f.State())
			if len(want) == 0 {
				t.Fatal("no node holds a live alloc at the end: the run checked nothing interesting")
			}
			g := fsm.New(testLogger(t))
			if err := restoreBytes(g, snapshotBytes(t, f)); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			checkUsage(t, g.State(), nodes, "after restore")
			for _, n := range nodes {
				a, _ := f.State().NodeUsage(nil, n)
				b, _ := g.State().NodeUsage(nil, n)
				if !proto.Equal(a, b) {
					t.Fatalf("node %s: usage %v before the snapshot, %v restored", n, a, b)
				}
			}
		})
	}
}

// TestSnapshotCarriesNoUsage: node_usage is derived, so a snapshot holds
// no record of it and a server that does not know it restores the stream
// without skipping anything.
func TestSnapshotCarriesNoUsage(t *testing.T) {
	f := jobsFixture(t)
	if u, err := f.State().NodeUsage(nil, "n1"); err != nil || u.GetAllocs() != 2 || u.GetMemoryMb() != 200 {
		t.Fatalf("n1 usage = %v, %v; want 2 allocs, 200 MB", u, err)
	}
	desc := describeSnapshot(t, snapshotBytes(t, f))
	if !strings.Contains(desc, fsm.TableAllocs+":") || strings.Contains(desc, fsm.TableNodeUsage) {
		t.Fatalf("snapshot %s: want allocs rows and no %s record", desc, fsm.TableNodeUsage)
	}
	if _, err := f.State().Index(fsm.TableNodeUsage); err == nil {
		t.Fatalf("Index(%s) answered: a derived table has no index", fsm.TableNodeUsage)
	}
}
