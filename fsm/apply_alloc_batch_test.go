package fsm_test

import (
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// batchFixture is two ready nodes, a job and one alloc on each (a1 on n1,
// a2 on n2), placed at index 3.
func batchFixture(t *testing.T) *fsm.FSM {
	t.Helper()
	f := fsm.New(testLogger(t))
	for i, id := range []string{"n1", "n2"} {
		applyOK(t, f, uint64(i+1), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: id, Status: pb.NodeStatus_NODE_STATUS_READY,
			Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1000}}})
	}
	applyOK(t, f, 3, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Type: pb.JobType_JOB_TYPE_SERVICE}})
	res := &pb.AllocResources{CpuMhz: 100, MemoryMb: 100}
	applyOK(t, f, 4, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e", JobId: "web", Allocs: []*pb.Allocation{
		{Id: "a1", NodeId: "n1", JobId: "web", Resources: res}, {Id: "a2", NodeId: "n2", JobId: "web", Resources: res}}}})
	return f
}

func running(id string) *pb.AllocClientUpdate {
	return &pb.AllocClientUpdate{AllocId: id, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING, UpdatedAt: 7}
}

func clientStatus(t *testing.T, f *fsm.FSM, id string) pb.AllocClientStatus {
	t.Helper()
	a, err := f.State().AllocByID(nil, id)
	if err != nil || a == nil {
		t.Fatalf("alloc %s: %v, %v", id, a, err)
	}
	return a.GetClientStatus()
}

// TestAllocClientUpdateBatchRefusesPartsAlone: a batched entry applies
// each node's part as its own command would be: a part naming an alloc of
// another node, one of a node not registered and a malformed one are
// refused alone, with errors naming the node and the alloc, and the
// parts around them are applied.
func TestAllocClientUpdateBatchRefusesPartsAlone(t *testing.T) {
	f := batchFixture(t)
	cmd := &pb.AllocClientUpdateCommand{Batch: []*pb.AllocClientUpdateCommand{
		{NodeId: "n1", Updates: []*pb.AllocClientUpdate{running("a1")}, ReceivedAt: 7},
		{NodeId: "n2", Updates: []*pb.AllocClientUpdate{running("a1")}, ReceivedAt: 7},
		{NodeId: "n9", Updates: []*pb.AllocClientUpdate{running("a9")}, ReceivedAt: 7},
		{NodeId: "n2", Batch: []*pb.AllocClientUpdateCommand{{NodeId: "n2", Updates: []*pb.AllocClientUpdate{running("a2")}}}},
		{NodeId: "n2", Updates: []*pb.AllocClientUpdate{running("a2")}, ReceivedAt: 7},
	}}
	res := applyAt(f, 5, mustEncode(t, fsm.AllocClientUpdate, cmd))
	if res.Err != nil {
		t.Fatalf("batch refused whole: %v", res.Err)
	}
	r, ok := res.Response.(*pb.AllocClientUpdateBatchResult)
	if !ok {
		t.Fatalf("response %T, want *pb.AllocClientUpdateBatchResult", res.Response)
	}
	want := []struct {
		part  uint32
		code  codes.Code
		words []string
	}{
		{1, codes.InvalidArgument, []string{`"n2"`, `"a1"`, `"n1"`}},
		{2, codes.NotFound, []string{`"n9"`}},
		{3, codes.InvalidArgument, []string{`"n2"`, "batch of its own"}},
	}
	if len(r.GetRefusals()) != len(want) {
		t.Fatalf("refusals %v, want parts 1, 2, 3", r.GetRefusals())
	}
	for i, w := range want {
		got := r.GetRefusals()[i]
		if got.GetPart() != w.part || codes.Code(got.GetCode()) != w.code {
			t.Errorf("refusal %d: part %d code %s, want part %d code %s (%s)", i, got.GetPart(), codes.Code(got.GetCode()), w.part, w.code, got.GetError())
		}
		for _, word := range w.words {
			if !strings.Contains(got.GetError(), word) {
				t.Errorf("refusal of part %d %q does not name %s", got.GetPart(), got.GetError(), word)
			}
		}
	}
	for _, id := range []string{"a1", "a2"} {
		if got := clientStatus(t, f, id); got != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING {
			t.Errorf("alloc %s is %s after the batch, want running", id, got)
		}
	}
}

// TestAllocClientUpdateBatchSameAsSeparate: a batch leaves the state the
// same commands applied one by one leave (but for the indexes: the batch's
// rows all carry its one index), including two parts for one alloc, the
// later building on the earlier.
func TestAllocClientUpdateBatchSameAsSeparate(t *testing.T) {
	parts := []*pb.AllocClientUpdateCommand{
		{NodeId: "n1", Updates: []*pb.AllocClientUpdate{running("a1")}, ReceivedAt: 7},
		{NodeId: "n2", Updates: []*pb.AllocClientUpdate{running("a2")}, ReceivedAt: 7},
		{NodeId: "n1", Updates: []*pb.AllocClientUpdate{{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, UpdatedAt: 8}}, ReceivedAt: 8},
		{NodeId: "n1", Updates: []*pb.AllocClientUpdate{running("a1")}, ReceivedAt: 9},
	}
	batched := batchFixture(t)
	if res := applyAt(batched, 5, mustEncode(t, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{Batch: parts})); res.Err != nil {
		t.Fatal(res.Err)
	}
	separate := batchFixture(t)
	// Applied as one raft batch, so every row carries one index as well.
	var logs []*raft.Log
	for _, p := range parts {
		logs = append(logs, &raft.Log{Index: 5, Term: 1, Type: raft.LogCommand, Data: mustEncode(t, fsm.AllocClientUpdate, p)})
	}
	for i, out := range separate.ApplyBatch(logs) {
		if err := out.(*fsm.ApplyResult).Err; err != nil {
			t.Fatalf("part %d alone: %v", i, err)
		}
	}
	for _, id := range []string{"a1", "a2"} {
		a, _ := batched.State().AllocByID(nil, id)
		b, _ := separate.State().AllocByID(nil, id)
		if !proto.Equal(a, b) {
			t.Errorf("alloc %s batched:\n%v\nseparate:\n%v", id, a, b)
		}
	}
	if got := clientStatus(t, batched, "a1"); got != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE {
		t.Errorf("a1 is %s, want complete kept over the later running", got)
	}
	j1, _ := batched.State().JobByID(nil, "web")
	j2, _ := separate.State().JobByID(nil, "web")
	if !proto.Equal(j1, j2) {
		t.Errorf("job batched %v, separate %v", j1, j2)
	}
}

// TestAllocClientUpdateBatchWithOwnFieldsRefusedWhole: a batched entry
// that also names a node of its own is malformed and changes nothing.
func TestAllocClientUpdateBatchWithOwnFieldsRefusedWhole(t *testing.T) {
	f := batchFixture(t)
	res := applyAt(f, 5, mustEncode(t, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1",
		Updates: []*pb.AllocClientUpdate{running("a1")},
		Batch:   []*pb.AllocClientUpdateCommand{{NodeId: "n2", Updates: []*pb.AllocClientUpdate{running("a2")}}}}))
	if res.Err == nil || !strings.Contains(res.Err.Error(), "only in its parts") {
		t.Fatalf("err %v, want the malformed batch refused", res.Err)
	}
	for _, id := range []string{"a1", "a2"} {
		if got := clientStatus(t, f, id); got != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING {
			t.Errorf("alloc %s is %s, want pending (nothing applied)", id, got)
		}
	}
}
