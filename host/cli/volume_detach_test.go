package cli

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// volumeDetachRoutes serves the detach as the servers do: refused while a
// claim on the node is not releasing (or past), else answered with what
// the node did and the claims moved to node-detached.
func (f *fakeCluster) volumeDetachRoutes(route func(string, func(*http.Request) (any, error))) {
	route("DELETE /v1/volume/csi/{id}/detach", func(r *http.Request) (any, error) {
		id, node := r.PathValue("id"), r.URL.Query().Get("node")
		v := f.volumes[id]
		if v == nil {
			return nil, notFound("volume", id)
		}
		resp := &pb.VolumeDetachResponse{Node: &pb.CSINodeDetachResponse{PluginId: v.GetVolume().GetPluginId(), Unstaged: true}}
		for _, c := range v.GetClaims() {
			if c.GetNodeId() != node {
				continue
			}
			if c.GetState() < pb.ClaimState_CLAIM_STATE_RELEASING {
				return nil, &apiErr{409, "failed_precondition",
					fmt.Sprintf("detaching volume %q from node %s: the volume is in use on the node: alloc %s (running, claim in-use); stop it first", id, node, c.GetAllocId())}
			}
			user := &pb.CSINodeDetachUser{ClaimId: c.GetId(), AllocId: c.GetAllocId()}
			if c.GetId() == "c-fail" { // the node fails to take it down
				resp.Node.Results = append(resp.Node.Results, &pb.CSINodeDetachResult{User: user,
					Outcome: pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_FAILED,
					Error:   fmt.Sprintf("detaching volume %q from node %s: teardown of alloc %s: device busy", id, node, c.GetAllocId())})
				resp.Claims = append(resp.Claims, c)
				continue
			}
			resp.Node.Results = append(resp.Node.Results, &pb.CSINodeDetachResult{User: user, Outcome: pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_DONE})
			c.State = pb.ClaimState_CLAIM_STATE_NODE_DETACHED
			resp.Node.AllocIds = append(resp.Node.AllocIds, c.GetAllocId())
			resp.Claims = append(resp.Claims, c)
		}
		f.index++
		resp.Meta = &pb.WriteMeta{Index: f.index}
		return resp, nil
	})
}

func detachView(st pb.ClaimState) *pb.VolumeView {
	return &pb.VolumeView{Volume: &pb.Volume{Id: "data", PluginId: "ebs"},
		Claims:      []*pb.Claim{{Id: "c1", VolumeId: "data", AllocId: allocA, NodeId: nodeA, State: st}},
		Attachments: []*pb.Attachment{{VolumeId: "data", NodeId: nodeA, State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED}}}
}

// `volume detach VOLUME NODE` resolves both prefixes, sends the detach,
// says what the node did and waits (blocking reads) until the claims on
// the node and the attachment are gone; a refusal exits 1 with the
// servers' message naming the alloc; -json prints the answer.
func TestVolumeDetach(t *testing.T) {
	f := newFakeCluster(t)
	f.nodes[nodeA] = &pb.Node{Id: nodeA, Name: "client-1"}
	f.volumes["data"] = detachView(pb.ClaimState_CLAIM_STATE_IN_USE)

	wantOut(t, []string{"volume", "detach", "-address", f.url, "data", "n1n1"}, exitError,
		`volume is in use on the node: alloc `+allocA, `"data"`, nodeA)

	f.volumes["data"] = detachView(pb.ClaimState_CLAIM_STATE_RELEASING)
	f.script = []step{
		func(f *fakeCluster) { // the controller unpublish fails once
			f.volumes["data"].Attachments[0].State = pb.AttachmentState_ATTACHMENT_STATE_DETACHING
			f.volumes["data"].Attachments[0].Attempts = 1
			f.volumes["data"].Attachments[0].LastError = &pb.VolumeError{Message: "timed out", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN}
		},
		func(f *fakeCluster) { f.volumes["data"].Claims, f.volumes["data"].Attachments = nil, nil },
	}
	out := wantOut(t, []string{"volume", "detach", "-address", f.url, "da", "n1n1"}, exitOK,
		`==> Volume "data" detached on node n1n1n1n1: unpublished for alloc a1a1a1a1; unstaged`,
		"Controller unpublish from node n1n1n1n1 failed (attempt 1, uncertain): timed out",
		`==> Claims of volume "data" on node n1n1n1n1 freed`)
	if len(f.script) != 0 {
		t.Fatalf("the command ended before the claims were freed:\n%s", out)
	}
	if !containsReq(f.reqs(), "DELETE /v1/volume/csi/data/detach?node="+nodeA) {
		t.Fatalf("requests %q, want the detach of data from the full node ID", f.reqs())
	}

	f.volumes["data"] = detachView(pb.ClaimState_CLAIM_STATE_RELEASING)
	f.script = []step{func(f *fakeCluster) { f.volumes["data"].Claims, f.volumes["data"].Attachments = nil, nil }}
	out = wantOut(t, []string{"volume", "detach", "-address", f.url, "-json", "data", nodeA}, exitOK)
	got := &pb.VolumeDetachResponse{}
	if err := apijson.Unmarshal([]byte(out), got); err != nil || len(got.GetNode().GetAllocIds()) != 1 || len(got.GetClaims()) != 0 {
		t.Fatalf("-json printed %s (%v), want the node's answer and no claim left", out, err)
	}

	// The node fails to take a use down: shown, its claim stays releasing,
	// and after -timeout the command exits 3 (detached, not freed), not 1;
	// -json still prints the node's answer and the claim as last seen.
	f.volumes["data"] = detachView(pb.ClaimState_CLAIM_STATE_RELEASING)
	f.volumes["data"].Claims[0].Id = "c-fail"
	f.script, f.waitTimesOut = nil, true
	wantOut(t, []string{"volume", "detach", "-address", f.url, "-timeout", "1ms", "data", nodeA}, exitPlacementFailed,
		"Teardown of alloc a1a1a1a1 failed (its claim stays releasing; the node retries): ", "device busy",
		"not freed after 1ms: claim c-fail of")
	out = wantOut(t, []string{"volume", "detach", "-address", f.url, "-json", "-timeout", "1ms", "data", nodeA}, exitPlacementFailed)
	got = &pb.VolumeDetachResponse{}
	if err := apijson.Unmarshal([]byte(out), got); err != nil || len(got.GetNode().GetResults()) != 1 || len(got.GetClaims()) != 1 ||
		got.GetClaims()[0].GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
		t.Fatalf("-json after the wait timed out printed %s (%v), want the node's answer and the releasing claim", out, err)
	}

	wantOut(t, []string{"volume", "detach", "-address", f.url, "data"}, exitUsage, "volume detach takes a volume ID and a node ID")
	wantOut(t, []string{"volume", "detach", "-address", f.url, "data", "ffff"}, exitError, `no node with ID or prefix "ffff"`)
}

func containsReq(reqs []string, want string) bool {
	for _, r := range reqs {
		if strings.HasPrefix(r, want) {
			return true
		}
	}
	return false
}
