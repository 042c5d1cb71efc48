package fsm_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// jobsFixture is an FSM with two ready nodes (1000 MHz, 1024 MB), job web
// registered at index 3 and two allocs placed on n1 and one on n2 at
// index 4 by eval e1.
func jobsFixture(t *testing.T) *fsm.FSM {
	t.Helper()
	f := fsm.New(testLogger(t))
	for i, id := range []string{"n1", "n2"} {
		n := &pb.Node{Id: id, Status: pb.NodeStatus_NODE_STATUS_READY, Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1024}}
		applyOK(t, f, uint64(i+1), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n})
	}
	applyOK(t, f, 3, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Type: pb.JobType_JOB_TYPE_SERVICE},
		Eval: &pb.Evaluation{Id: "e1", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_PENDING}})
	applyOK(t, f, 4, fsm.PlanApply, planCmd("e1", alloc("a1", "n1", 100), alloc("a2", "n1", 100), alloc("a3", "n2", 100)))
	return f
}

func alloc(id, node string, mem int64) *pb.Allocation {
	return &pb.Allocation{Id: id, NodeId: node, JobId: "web", EvalId: "e1", Resources: &pb.AllocResources{CpuMhz: 10, MemoryMb: mem}}
}

func planCmd(eval string, allocs ...*pb.Allocation) *pb.PlanApplyCommand {
	return &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: eval, JobId: "web", Allocs: allocs}}
}

func ids[M interface{ GetId() string }](rows []M) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.GetId()
	}
	return out
}

func TestJobReads(t *testing.T) {
	f := jobsFixture(t)
	for i := range 8 {
		applyOK(t, f, uint64(10+i), fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Priority: int32(i)}})
	}
	applyOK(t, f, 20, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "api"}})
	st := f.State()
	versions, err := st.JobVersions(nil, "web")
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, v := range versions {
		got = append(got, v.GetVersion())
	}
	if want := []uint64{8, 7, 6, 5, 4, 3}; !slices.Equal(got, want) {
		t.Errorf("JobVersions = %v, want the newest %d, newest first: %v", got, fsm.JobVersionsKept, want)
	}
	if v, _ := st.JobVersion(nil, "web", 5); v.GetVersion() != 5 || v.GetPriority() != 4 {
		t.Errorf("JobVersion(web, 5) = %v, want version 5 with priority 4", v)
	}
	if v, _ := st.JobVersion(nil, "web", 2); v != nil {
		t.Errorf("JobVersion(web, 2) = %v, want nil: dropped as the oldest", v)
	}
	if j, _ := st.JobByID(nil, "web"); j.GetVersion() != 8 || j.GetCreateIndex() != 3 || j.GetJobModifyIndex() != 17 {
		t.Errorf("JobByID(web) = %v, want version 8, create index 3, job modify index 17", j)
	}
	page, next, err := st.JobsPage(nil, "", 1, nil)
	if err != nil || !slices.Equal(ids(page), []string{"api"}) || next != "web" {
		t.Errorf("JobsPage(first 1) = %v %q %v, want [api] and next web", ids(page), next, err)
	}
	page, next, _ = st.JobsPage(nil, next, 1, nil)
	if !slices.Equal(ids(page), []string{"web"}) || next != "" {
		t.Errorf("JobsPage(from web) = %v %q, want [web] and no next", ids(page), next)
	}
}

func TestEvalAndAllocReads(t *testing.T) {
	f := jobsFixture(t)
	applyOK(t, f, 5, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{
		{Id: "e2", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_BLOCKED},
		{Id: "e3", JobId: "other", Status: pb.EvalStatus_EVAL_STATUS_PENDING},
	}})
	st := f.State()
	for _, tc := range []struct {
		status pb.EvalStatus
		want   []string
	}{
		{pb.EvalStatus_EVAL_STATUS_PENDING, []string{"e1", "e3"}},
		{pb.EvalStatus_EVAL_STATUS_BLOCKED, []string{"e2"}},
		{pb.EvalStatus_EVAL_STATUS_COMPLETE, nil},
	} {
		evals, err := st.EvalsByStatus(nil, tc.status)
		if err != nil || !slices.Equal(ids(evals), tc.want) {
			t.Errorf("EvalsByStatus(%s) = %v, %v; want %v", tc.status, ids(evals), err, tc.want)
		}
	}
	if evals, _ := st.EvalsByJob(nil, "web"); !slices.Equal(ids(evals), []string{"e1", "e2"}) {
		t.Errorf("EvalsByJob(web) = %v, want [e1 e2]", ids(evals))
	}
	if e, _ := st.EvalByID(nil, "e3"); e.GetJobId() != "other" || e.GetCreateIndex() != 5 {
		t.Errorf("EvalByID(e3) = %v", e)
	}
	evals, next, _ := st.EvalsPage(nil, "e2", 0, func(e *pb.Evaluation) bool { return e.GetJobId() == "web" })
	if !slices.Equal(ids(evals), []string{"e2"}) || next != "" {
		t.Errorf("EvalsPage(from e2, web only) = %v %q", ids(evals), next)
	}
	if allocs, _ := st.AllocsByNode(nil, "n1"); !slices.Equal(ids(allocs), []string{"a1", "a2"}) {
		t.Errorf("AllocsByNode(n1) = %v", ids(allocs))
	}
	if allocs, _ := st.AllocsByJob(nil, "web"); !slices.Equal(ids(allocs), []string{"a1", "a2", "a3"}) {
		t.Errorf("AllocsByJob(web) = %v", ids(allocs))
	}
	if allocs, _ := st.AllocsByEval(nil, "e1"); len(allocs) != 3 {
		t.Errorf("AllocsByEval(e1) = %v", ids(allocs))
	}
	if a, _ := st.AllocByID(nil, "a3"); a.GetNodeId() != "n2" || a.GetAllocModifyIndex() != 4 {
		t.Errorf("AllocByID(a3) = %v", a)
	}
	allocs, next, _ := st.AllocsPage(nil, "", 2, nil)
	if !slices.Equal(ids(allocs), []string{"a1", "a2"}) || next != "a3" {
		t.Errorf("AllocsPage(2) = %v %q, want [a1 a2] and a3", ids(allocs), next)
	}
}

// TestNodeAllocsIndexWakesOnlyForServerChanges watches node n1's alloc
// index as a client's blocking query does: its own client updates, and
// changes to other nodes' allocs, do not fire it; a stop of one of its
// allocs does.
func TestNodeAllocsIndexWakesOnlyForServerChanges(t *testing.T) {
	f := jobsFixture(t)
	ws := memdb.NewWatchSet()
	index, err := f.State().NodeAllocsIndex(ws, "n1")
	if err != nil || index != 4 {
		t.Fatalf("NodeAllocsIndex(n1) = %d, %v; want 4", index, err)
	}
	applyOK(t, f, 5, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1", Updates: []*pb.AllocClientUpdate{
		{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING},
	}})
	applyOK(t, f, 6, fsm.PlanApply, planCmd("e1", alloc("a4", "n2", 10)))
	// Watch reports true when its timeout ends it: nothing fired.
	if timedOut := ws.Watch(time.After(10 * time.Millisecond)); !timedOut {
		t.Fatal("n1's alloc index watch fired for a client update and a placement on n2")
	}
	if index, _ := f.State().NodeAllocsIndex(nil, "n1"); index != 4 {
		t.Errorf("NodeAllocsIndex(n1) after client update = %d, want 4", index)
	}
	applyOK(t, f, 7, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e1", JobId: "web",
		Stops: []*pb.AllocStop{{AllocId: "a2"}}}})
	if timedOut := ws.Watch(time.After(time.Minute)); timedOut {
		t.Fatal("n1's alloc index watch did not fire for a stop of one of its allocs")
	}
	if index, _ := f.State().NodeAllocsIndex(nil, "n1"); index != 7 {
		t.Errorf("NodeAllocsIndex(n1) after the stop = %d, want 7", index)
	}
	// A node that never had allocs answers the allocs table's index.
	if index, _ := f.State().NodeAllocsIndex(nil, "n9"); index != 7 {
		t.Errorf("NodeAllocsIndex(n9) = %d, want the allocs table's 7", index)
	}
}

// TestBatchPlansSeeEachOther applies, in one raft batch, two plans that
// each fit n1 alone but not together, then a plan placing on a node
// registered earlier in the batch: the second plan's fit check reads the
// first plan's alloc through the allocs' node index, and is refused.
func TestBatchPlansSeeEachOther(t *testing.T) {
	f := jobsFixture(t) // n1 holds 200 MB of 1024
	data := [][]byte{
		mustEncode(t, fsm.PlanApply, planCmd("e1", alloc("big1", "n1", 600))),
		mustEncode(t, fsm.PlanApply, planCmd("e1", alloc("big2", "n1", 600))),
		mustEncode(t, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n3", Status: pb.NodeStatus_NODE_STATUS_READY,
			Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1024}}}),
		mustEncode(t, fsm.PlanApply, planCmd("e1", alloc("big3", "n3", 600))),
	}
	logs := make([]*raft.Log, len(data))
	for i, d := range data {
		logs[i] = &raft.Log{Index: uint64(10 + i), Type: raft.LogCommand, Data: d}
	}
	out := f.ApplyBatch(logs)
	results := make([]*pb.PlanResult, len(out))
	for i, r := range out {
		res := r.(*fsm.ApplyResult)
		if res.Err != nil {
			t.Fatalf("entry %d: %v", i, res.Err)
		}
		results[i], _ = res.Response.(*pb.PlanResult)
	}
	if r := results[0]; r.GetAppliedAllocs() != 1 || len(r.GetRefusedNodes()) != 0 || r.GetIndex() != 10 {
		t.Errorf("first plan: %v, want its alloc applied at 10", r)
	}
	if r := results[1]; r.GetAppliedAllocs() != 0 || !slices.Equal(r.GetRefusedNodes(), []string{"n1"}) ||
		!strings.Contains(r.GetRefusals()["n1"], "memory exhausted") {
		t.Errorf("second plan: %v, want n1 refused for memory", r)
	}
	if results[2] != nil {
		t.Errorf("NodeRegister answered %v, want no response", results[2])
	}
	if r := results[3]; r.GetAppliedAllocs() != 1 {
		t.Errorf("plan on the node registered in the batch: %v, want applied", r)
	}
	if a, _ := f.State().AllocByID(nil, "big2"); a != nil {
		t.Error("the refused placement was stored")
	}
}

// TestBatchRefusalsWriteNothing puts the job commands' refusals between
// accepted commands of one batch: each refusal is what it is alone, and
// the batch ends in the state of the accepted commands alone.
func TestBatchRefusalsWriteNothing(t *testing.T) {
	cmds := []struct {
		data     []byte
		sentinel error
	}{
		{mustEncode(t, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web"}, EnforceIndex: true, IfJobModifyIndex: 3}), nil},
		// The registration above moved web's job modify index to 10.
		{mustEncode(t, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web"}, EnforceIndex: true, IfJobModifyIndex: 3}), fsm.ErrJobChanged},
		{mustEncode(t, fsm.JobRevert, &pb.JobRevertCommand{JobId: "web", Version: 7}), fsm.ErrJobVersionNotFound},
		{mustEncode(t, fsm.JobDeregister, &pb.JobDeregisterCommand{JobId: "ghost"}), fsm.ErrJobNotFound},
		{mustEncode(t, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{JobId: "web", Allocs: []*pb.Allocation{
			{Id: "x", NodeId: "n1", JobId: "web", JobVersion: 9}}}}), fsm.ErrJobVersionNotFound},
		{mustEncode(t, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n2", Updates: []*pb.AllocClientUpdate{
			{AllocId: "a3", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING},
			{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING}}}), fsm.ErrAllocNodeMismatch},
		{mustEncode(t, fsm.NodeDrain, &pb.NodeDrainCommand{NodeId: "n1", Drain: &pb.DrainStrategy{DeadlineMs: 1}}), nil},
		{mustEncode(t, fsm.NodeEligibility, &pb.NodeEligibilityCommand{NodeId: "n1", Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE}), fsm.ErrNodeDraining},
		{mustEncode(t, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{{Id: "e9"}}}), fsm.ErrInvalidCommand},
		{mustEncode(t, fsm.GC, &pb.GCCommand{AllocIds: []string{"a1"}}), nil},
	}
	batched, accepted := jobsFixture(t), jobsFixture(t)
	logs := make([]*raft.Log, len(cmds))
	for i, c := range cmds {
		logs[i] = &raft.Log{Index: uint64(10 + i), Type: raft.LogCommand, Data: c.data}
	}
	for i, r := range batched.ApplyBatch(logs) {
		res := r.(*fsm.ApplyResult)
		if want := cmds[i].sentinel; (want == nil) != (res.Err == nil) || (want != nil && !errors.Is(res.Err, want)) {
			t.Errorf("entry %d (%s): %v, want %v", i, res.Type, res.Err, want)
		}
		if cmds[i].sentinel == nil {
			if res := applyAt(accepted, logs[i].Index, logs[i].Data); res.Err != nil {
				t.Fatalf("entry %d alone: %v", i, res.Err)
			}
		}
	}
	if got, want := mustDump(t, batched.State()), mustDump(t, accepted.State()); got != want {
		t.Errorf("batch with refusals:\n%s\naccepted commands alone:\n%s", got, want)
	}
}

// TestPlanResultThroughRaft proposes plans through a real raft and reads
// their results with PlanResultOf: applied, refused per node, and refused
// as a whole.
func TestPlanResultThroughRaft(t *testing.T) {
	f := fsm.New(testLogger(t))
	r := newSingleRaft(t, f)
	propose := func(typ fsm.MessageType, cmd proto.Message) raft.ApplyFuture {
		t.Helper()
		return r.Apply(mustEncode(t, typ, cmd), 10*time.Second)
	}
	ctx := t.Context()
	if _, err := fsm.ResultOf(ctx, propose(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n1",
		Status: pb.NodeStatus_NODE_STATUS_READY, Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1024}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := fsm.ResultOf(ctx, propose(fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web"}})); err != nil {
		t.Fatal(err)
	}
	res, err := fsm.PlanResultOf(ctx, propose(fsm.PlanApply, planCmd("e1", alloc("a1", "n1", 1000), alloc("a2", "n2", 1))))
	if err != nil {
		t.Fatal(err)
	}
	if res.GetAppliedAllocs() != 1 || !slices.Equal(res.GetRefusedNodes(), []string{"n2"}) || res.GetIndex() == 0 {
		t.Errorf("PlanResultOf = %v, want a1 applied and n2 (not registered) refused", res)
	}
	if _, err := fsm.PlanResultOf(ctx, propose(fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{JobId: "gone",
		Allocs: []*pb.Allocation{{Id: "g1", NodeId: "n1", JobId: "gone"}}}})); !errors.Is(err, fsm.ErrJobNotFound) {
		t.Errorf("plan for a job never registered: %v, want ErrJobNotFound", err)
	}
	if _, err := fsm.PlanResultOf(ctx, propose(fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "api"}})); !errors.Is(err, fsm.ErrUnexpectedResponse) {
		t.Errorf("PlanResultOf on a JobRegister: %v, want ErrUnexpectedResponse", err)
	}
}

// TestGCCandidatesAreCollected proposes what GCCandidates returns and
// checks it all goes, and nothing else.
func TestGCCandidatesAreCollected(t *testing.T) {
	f := jobsFixture(t)
	applyOK(t, f, 5, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1", Updates: []*pb.AllocClientUpdate{
		{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE},
		{AllocId: "a2", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}}})
	applyOK(t, f, 6, fsm.JobDeregister, &pb.JobDeregisterCommand{JobId: "web"})
	applyOK(t, f, 7, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{{Id: "e1", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_COMPLETE}}})
	cmd, err := f.State().GCCandidates(100, 0)
	if err != nil {
		t.Fatal(err)
	}
	// a3 still runs on n2: it, the eval that placed it and the job stay.
	if !slices.Equal(cmd.GetAllocIds(), []string{"a1", "a2"}) || len(cmd.GetEvalIds()) != 0 || len(cmd.GetJobIds()) != 0 {
		t.Fatalf("GCCandidates = %v, want allocs a1 a2 only", cmd)
	}
	applyOK(t, f, 8, fsm.GC, cmd)
	if allocs, _ := f.State().AllocsByJob(nil, "web"); !slices.Equal(ids(allocs), []string{"a3"}) {
		t.Errorf("allocs after GC: %v, want [a3]", ids(allocs))
	}
	applyOK(t, f, 9, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n2", Updates: []*pb.AllocClientUpdate{
		{AllocId: "a3", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED}}})
	cmd, _ = f.State().GCCandidates(100, 0)
	if want := fmt.Sprint([]string{"a3"}, []string{"e1"}, []string{"web"}); fmt.Sprint(cmd.GetAllocIds(), cmd.GetEvalIds(), cmd.GetJobIds()) != want {
		t.Fatalf("GCCandidates = %v, want a3, e1 and web together", cmd)
	}
	applyOK(t, f, 10, fsm.GC, cmd)
	if j, _ := f.State().JobByID(nil, "web"); j != nil {
		t.Errorf("job web after GC: %v", j)
	}
	if v, _ := f.State().JobVersions(nil, "web"); len(v) != 0 {
		t.Errorf("job web's versions after GC: %d", len(v))
	}
}

// TestBatchGCSeesEarlierPlacement completes eval e1 and then, in one
// batch, places a new alloc for it and collects it: the GC's check reads
// the allocs' eval index through the batch's transaction, finds the new
// live alloc and keeps e1.
func TestBatchGCSeesEarlierPlacement(t *testing.T) {
	f := jobsFixture(t)
	applyOK(t, f, 5, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1", Updates: []*pb.AllocClientUpdate{
		{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE},
		{AllocId: "a2", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}}})
	applyOK(t, f, 6, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n2", Updates: []*pb.AllocClientUpdate{
		{AllocId: "a3", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}}})
	applyOK(t, f, 7, fsm.JobDeregister, &pb.JobDeregisterCommand{JobId: "web"})
	applyOK(t, f, 8, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{{Id: "e1", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_COMPLETE}}})
	cmd, err := f.State().GCCandidates(100, 0)
	if err != nil || !slices.Equal(cmd.GetEvalIds(), []string{"e1"}) || !slices.Equal(cmd.GetJobIds(), []string{"web"}) {
		t.Fatalf("GCCandidates = %v, %v; want e1 and web with their allocs", cmd, err)
	}
	// Alone, the candidates go (checked on a copy restored from a
	// snapshot); after the late placement, e1 and web stay.
	control := fsm.New(testLogger(t))
	if err := restoreBytes(control, snapshotBytes(t, f)); err != nil {
		t.Fatal(err)
	}
	applyOK(t, control, 9, fsm.GC, cmd)
	if e, _ := control.State().EvalByID(nil, "e1"); e != nil {
		t.Fatal("the candidates alone did not collect e1")
	}
	gc := cmd
	out := f.ApplyBatch([]*raft.Log{
		{Index: 9, Type: raft.LogCommand, Data: mustEncode(t, fsm.PlanApply, planCmd("e1", alloc("late", "n1", 10)))},
		{Index: 10, Type: raft.LogCommand, Data: mustEncode(t, fsm.GC, gc)},
	})
	for i, r := range out {
		if err := r.(*fsm.ApplyResult).Err; err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	if e, _ := f.State().EvalByID(nil, "e1"); e == nil {
		t.Error("e1 was collected though an alloc it placed earlier in the batch is live")
	}
	if j, _ := f.State().JobByID(nil, "web"); j == nil {
		t.Error("web was collected though it has allocs")
	}
}
