package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

const (
	snw = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER
	fs  = pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM
)

// volumeCmd registers a single-node-writer volume of plugin.
func volumeCmd(id, plugin string) *pb.VolumeRegisterCommand {
	return &pb.VolumeRegisterCommand{Volume: &pb.Volume{Id: id, PluginId: plugin,
		Capabilities: []*pb.VolumeCapability{{AccessMode: snw, AttachmentMode: fs}}}}
}

// claimPlan places alloc on node with a write claim on volume.
func claimPlan(alloc, node, claim, volume string) *pb.PlanApplyCommand {
	return &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e1", JobId: "web",
		Allocs: []*pb.Allocation{{Id: alloc, NodeId: node, JobId: "web", Resources: &pb.AllocResources{CpuMhz: 10, MemoryMb: 10}}},
		Claims: []*pb.Claim{{Id: claim, VolumeId: volume, AllocId: alloc, Mode: pb.ClaimMode_CLAIM_MODE_WRITE, AccessMode: snw, AttachmentMode: fs}}}}
}

func transition(id string, state pb.ClaimState, node string) *pb.ClaimUpdateCommand {
	return &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: id, State: state, NodeId: node}}}
}

// claimsSeeded holds nodes n1 and n2 (n1 runs a controller of ebs, which
// requires one), job web, and volumes v1 (ebs) and v2 (nfs, no plugin
// row); logs go to logs.
func claimsSeeded(t *testing.T, logs *bytes.Buffer) *fsm.FSM {
	f := fsm.New(hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}))
	for i, n := range []string{"n1", "n2"} {
		applyOK(t, f, uint64(i+1), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: n, Status: pb.NodeStatus_NODE_STATUS_READY,
			Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1000}}})
	}
	applyOK(t, f, 3, fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: "n1",
		Controllers: map[string]*pb.CSIPluginInfo{"ebs": {Healthy: true, ControllerRequired: true}},
		Nodes:       map[string]*pb.CSIPluginInfo{"ebs": {Healthy: true}}})
	applyOK(t, f, 4, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web"}})
	applyOK(t, f, 5, fsm.VolumeRegister, volumeCmd("v1", "ebs"))
	applyOK(t, f, 6, fsm.VolumeRegister, volumeCmd("v2", "nfs"))
	return f
}

// TestBatchClaimsMatchOneByOne applies the claim machine's commands, with
// refusals that read through indexes between them, as one raft batch and
// one by one: the same answers and the same state, and no command
// refused after writing (which would make the batch redo itself).
func TestBatchClaimsMatchOneByOne(t *testing.T) {
	type entry struct {
		typ  fsm.MessageType
		msg  proto.Message
		want error
	}
	entries := []entry{
		{fsm.PlanApply, claimPlan("a1", "n1", "c1", "v1"), nil},
		// n2's plan reads c1 through the volume index: refused on its node
		// (a plan result, not an error).
		{fsm.PlanApply, claimPlan("a2", "n2", "c2", "v1"), nil},
		{fsm.ClaimUpdate, transition("c1", pb.ClaimState_CLAIM_STATE_READY, ""), fsm.ErrClaimTransition},
		{fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n1", State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED}, nil},
		{fsm.ClaimUpdate, transition("c1", pb.ClaimState_CLAIM_STATE_IN_USE, "n1"), nil},
		// Two transitions, the second refused: the first is not written.
		{fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{
			{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_RELEASING},
			{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_FREED}}}, fsm.ErrClaimTransition},
		{fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{Id: "op1", VolumeId: "v1", NodeId: "n1",
			Mode: pb.ClaimMode_CLAIM_MODE_WRITE, AccessMode: snw, AttachmentMode: fs}}, fsm.ErrNoFreeClaim},
		{fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{Id: "op2", VolumeId: "v1", NodeId: "n1",
			Mode: pb.ClaimMode_CLAIM_MODE_READ, AccessMode: snw, AttachmentMode: fs}}, nil},
		{fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1", Updates: []*pb.AllocClientUpdate{
			{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED}}}, nil},
		{fsm.ClaimUpdate, transition("c1", pb.ClaimState_CLAIM_STATE_NODE_DETACHED, "n1"), nil},
		{fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n1", State: pb.AttachmentState_ATTACHMENT_STATE_DETACHING}, fsm.ErrAttachmentTransition},
		{fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "op2"}, nil},
		{fsm.ClaimUpdate, transition("op2", pb.ClaimState_CLAIM_STATE_NODE_DETACHED, "n1"), nil},
		{fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n1", State: pb.AttachmentState_ATTACHMENT_STATE_DETACHED}, nil},
		{fsm.VolumeDeregister, &pb.VolumeDeregisterCommand{VolumeId: "v1"}, nil},
		{fsm.PlanApply, claimPlan("a3", "n2", "c3", "v1"), nil},
		{fsm.NodeFence, &pb.NodeFenceCommand{NodeId: "ghost", Fenced: true}, fsm.ErrNodeNotFound},
	}
	logs := make([]*raft.Log, len(entries))
	for i, e := range entries {
		logs[i] = &raft.Log{Index: uint64(10 + i), Term: 1, Type: raft.LogCommand, Data: mustEncode(t, e.typ, e.msg)}
	}
	var batchLogs, singleLogs bytes.Buffer
	batched, single := claimsSeeded(t, &batchLogs), claimsSeeded(t, &singleLogs)
	got := batched.ApplyBatch(logs)
	for i, e := range entries {
		w, g := single.ApplyLog(logs[i]), got[i].(*fsm.ApplyResult)
		if !errors.Is(w.Err, e.want) || (e.want == nil) != (w.Err == nil) {
			t.Errorf("entry %d (%s) alone: %v, want %v", i, e.typ, w.Err, e.want)
		}
		if (g.Err == nil) != (w.Err == nil) || (g.Err != nil && g.Err.Error() != w.Err.Error()) {
			t.Errorf("entry %d (%s): batch answered %v, one by one %v", i, e.typ, g.Err, w.Err)
		}
		if !proto.Equal(g.Response, w.Response) {
			t.Errorf("entry %d (%s): batch response %v, one by one %v", i, e.typ, g.Response, w.Response)
		}
	}
	refused := got[1].(*fsm.ApplyResult).Response.(*pb.PlanResult)
	if reason := refused.GetRefusals()["n2"]; !strings.Contains(reason, `volume "v1"`) || !strings.Contains(reason, `alloc "a2"`) || !strings.Contains(reason, `node "n2"`) {
		t.Errorf("n2's refusal %q does not name volume v1, alloc a2 and node n2", reason)
	}
	if placed := got[15].(*fsm.ApplyResult).Response.(*pb.PlanResult); placed.GetAppliedAllocs() != 0 || len(placed.GetRefusedNodes()) != 1 {
		t.Errorf("a plan claiming a deregistered volume: %v, want its node refused", placed)
	}
	if want, gotState := mustDump(t, single.State()), mustDump(t, batched.State()); gotState != want {
		t.Errorf("state after ApplyBatch:\n%s\nafter one by one:\n%s", gotState, want)
	}
	if strings.Contains(batchLogs.String(), "failed after writing") {
		t.Errorf("a claim command was refused after writing, so the batch redid itself:\n%s", batchLogs.String())
	}
}

// TestReaperReadsByState: the reaper and the attach reconciler list what
// they act on by state, and a watch on that list wakes in the apply that
// makes an alloc terminal, with no scan.
func TestReaperReadsByState(t *testing.T) {
	var logs bytes.Buffer
	f := claimsSeeded(t, &logs)
	applyOK(t, f, 10, fsm.PlanApply, claimPlan("a1", "n1", "c1", "v1"))
	applyOK(t, f, 11, fsm.PlanApply, claimPlan("a2", "n2", "c2", "v2"))
	st := f.State()
	attaching, err := st.AttachmentsByState(nil, pb.AttachmentState_ATTACHMENT_STATE_ATTACHING)
	if err != nil || len(attaching) != 1 || attaching[0].GetVolumeId() != "v1" || attaching[0].GetNodeId() != "n1" || attaching[0].GetPluginId() != "ebs" {
		t.Fatalf("attaching attachments = %v (%v), want v1 on n1 of plugin ebs", attaching, err)
	}
	if c, _ := st.ClaimByID(nil, "c2"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
		t.Fatalf("claim c2 of a volume needing no controller is %s, want ready", c.GetState())
	}
	// Only releasing and later states are indexed; the others are read by
	// a scan, with the same answer.
	for state, want := range map[pb.ClaimState]string{pb.ClaimState_CLAIM_STATE_RESERVED: "c1", pb.ClaimState_CLAIM_STATE_READY: "c2"} {
		if got, err := st.ClaimsByState(nil, state); err != nil || len(got) != 1 || got[0].GetId() != want {
			t.Fatalf("%s claims = %v (%v), want %s", state, got, err, want)
		}
	}
	ws := memdb.NewWatchSet()
	releasing, err := st.ClaimsByState(ws, pb.ClaimState_CLAIM_STATE_RELEASING)
	if err != nil || len(releasing) != 0 {
		t.Fatalf("releasing claims before any stop = %v (%v)", releasing, err)
	}
	applyOK(t, f, 12, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n2", Updates: []*pb.AllocClientUpdate{
		{AllocId: "a2", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, UpdatedAt: 99}}})
	if !fired(ws) {
		t.Fatal("the watch on releasing claims did not fire when a2 completed")
	}
	releasing, _ = st.ClaimsByState(nil, pb.ClaimState_CLAIM_STATE_RELEASING)
	if len(releasing) != 1 || releasing[0].GetId() != "c2" || releasing[0].GetModifiedAt() != 99 || releasing[0].GetModifyIndex() != 12 {
		t.Fatalf("releasing claims after a2 completed = %v, want c2 modified at 99, index 12", releasing)
	}
	if ready, err := st.ClaimsByState(nil, pb.ClaimState_CLAIM_STATE_READY); err != nil || len(ready) != 0 {
		t.Fatalf("ready claims after a2 completed = %v (%v), want none", ready, err)
	}
	byNode, _ := st.ClaimsByNode(nil, "n1")
	byAlloc, _ := st.ClaimsByAlloc(nil, "a1")
	byVolume, _ := st.ClaimsByVolume(nil, "v1")
	for name, got := range map[string][]*pb.Claim{"node n1": byNode, "alloc a1": byAlloc, "volume v1": byVolume} {
		if len(got) != 1 || got[0].GetId() != "c1" {
			t.Errorf("claims by %s = %v, want c1", name, got)
		}
	}
	if vols, _ := st.VolumesByPlugin(nil, "ebs"); len(vols) != 1 || vols[0].GetId() != "v1" || !vols[0].GetControllerRequired() {
		t.Errorf("volumes of ebs = %v, want v1 requiring a controller", vols)
	}
	if atts, _ := st.AttachmentsByNode(nil, "n1"); len(atts) != 1 {
		t.Errorf("attachments on n1 = %v, want one", atts)
	}
}

// TestSharedVolumeClaimsCheckEveryLimit: on a volume many claims share,
// a claim whose mode limits nothing but the access mode (multi-node
// reader-only or multi-writer, a read under multi-node single-writer) is
// judged by one held claim, and the modes that limit writers still count
// them all: a second writer is refused on a multi-node single-writer
// volume whose one writer sorts after twenty readers, and a claim through
// another access mode is refused on a volume twenty multi-writers share.
func TestSharedVolumeClaimsCheckEveryLimit(t *testing.T) {
	const (
		mnsw = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_SINGLE_WRITER
		mnmw = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER
		mnro = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY
	)
	f := claimsSeeded(t, &bytes.Buffer{})
	index := uint64(10)
	caps := []*pb.VolumeCapability{{AccessMode: mnsw, AttachmentMode: fs}, {AccessMode: mnmw, AttachmentMode: fs}, {AccessMode: mnro, AttachmentMode: fs}}
	for _, id := range []string{"sw", "mw"} {
		index++
		applyOK(t, f, index, fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: &pb.Volume{Id: id, PluginId: "nfs", Capabilities: caps}})
	}
	claim := func(id, volume, node string, mode pb.ClaimMode, access pb.VolumeAccessMode) error {
		t.Helper()
		index++
		res := applyAt(f, index, mustEncode(t, fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{
			Id: id, VolumeId: volume, NodeId: node, Mode: mode, AccessMode: access, AttachmentMode: fs}}))
		return res.Err
	}
	nodes := []string{"n1", "n2"}
	for i := range 20 {
		if err := claim(fmt.Sprintf("a-reader-%02d", i), "sw", nodes[i%2], pb.ClaimMode_CLAIM_MODE_READ, mnsw); err != nil {
			t.Fatal(err)
		}
		if err := claim(fmt.Sprintf("a-writer-%02d", i), "mw", nodes[i%2], pb.ClaimMode_CLAIM_MODE_WRITE, mnmw); err != nil {
			t.Fatal(err)
		}
	}
	if err := claim("z-writer", "sw", "n1", pb.ClaimMode_CLAIM_MODE_WRITE, mnsw); err != nil {
		t.Fatalf("the first writer of sw: %v", err)
	}
	for _, c := range []struct {
		id, volume string
		mode       pb.ClaimMode
		access     pb.VolumeAccessMode
		want       error
	}{
		{"b-writer", "sw", pb.ClaimMode_CLAIM_MODE_WRITE, mnsw, fsm.ErrNoFreeClaim},
		{"b-reader", "sw", pb.ClaimMode_CLAIM_MODE_READ, mnsw, nil},
		{"b-ro", "sw", pb.ClaimMode_CLAIM_MODE_READ, mnro, fsm.ErrNoFreeClaim},
		{"b-writer", "mw", pb.ClaimMode_CLAIM_MODE_WRITE, mnmw, nil},
		{"b-ro", "mw", pb.ClaimMode_CLAIM_MODE_READ, mnro, fsm.ErrNoFreeClaim},
	} {
		if err := claim(c.id+"-"+c.volume, c.volume, "n2", c.mode, c.access); !errors.Is(err, c.want) {
			t.Errorf("%s on %s (%s): %v, want %v", c.id, c.volume, c.access, err, c.want)
		}
	}
}
