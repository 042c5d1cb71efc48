package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// claimCluster is one server (or three: servers > 1) with nodes n1 and n2
// registered; n1 runs a healthy node instance of plugin "hp", n2 an
// unhealthy one. controller: n1 also runs hp's controller, which requires
// controller publish (a claim waits for its attachment).
type claimCluster struct {
	tc     *testCluster
	s      *Server
	claims pb.ClaimsClient
	n1, n2 *pb.Node
}

func newClaimCluster(t *testing.T, servers int, controller bool) *claimCluster {
	t.Helper()
	tc := newTestCluster(t, servers, withVersion(version.Version), func(c *testConfig) { c.controllerCaller = heldCaller{} })
	s := tc.waitLeader()
	cc := &claimCluster{tc: tc, s: s, n1: testNode("n1"), n2: testNode("n2")}
	// Fixed IDs, n1's sorting first: the node choice's tie-break is the
	// lowest ID, so a test can tell a preference from it.
	cc.n1.Id, cc.n2.Id = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	for _, n := range []*pb.Node{cc.n1, cc.n2} {
		n.Resources = &pb.NodeResources{CpuMhz: 4000, MemoryMb: 4096}
		if _, err := tc.register(s, n); err != nil {
			t.Fatal(err)
		}
	}
	csiClient := pb.NewCSIPluginsClient(tc.conn(s))
	up := &pb.NodeCSIUpdateRequest{NodeId: cc.n1.GetId(), Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, NodeInfo: &pb.CSINodeInfo{Id: "csi-n1"}}}}
	if controller {
		up.Controllers = map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, ControllerRequired: true,
			ControllerInfo: &pb.CSIControllerInfo{SupportsAttachDetach: true}}}
	}
	updateCSI(t, csiClient, up)
	updateCSI(t, csiClient, &pb.NodeCSIUpdateRequest{NodeId: cc.n2.GetId(),
		Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: false, HealthDescription: "probe: not ready"}}})
	cc.claims = pb.NewClaimsClient(tc.conn(s))
	return cc
}

// heldCaller answers no controller call before the call's context ends:
// these tests write the attachment's outcome themselves, and the leader's
// attach reconciler must not write one first.
type heldCaller struct{}

func (heldCaller) ControllerCall(ctx context.Context, _, _ string, _ *pb.CSIControllerInstance, _ string, _, _ proto.Message) error {
	<-ctx.Done()
	return ctx.Err()
}

// volume registers a volume of plugin hp offering the access modes given
// (as file systems), with a secret.
func (cc *claimCluster) volume(t *testing.T, id string, modes ...pb.VolumeAccessMode) {
	t.Helper()
	v := &pb.Volume{Id: id, Name: id, PluginId: "hp", ExternalId: "ext-" + id, Secrets: map[string]string{"token": "s3cr3t-" + id}}
	for _, m := range modes {
		v.Capabilities = append(v.Capabilities, &pb.VolumeCapability{AccessMode: m, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM})
	}
	if _, err := cc.s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: v}); err != nil {
		t.Fatal(err)
	}
}

// wantCode fails unless err has the code and its message every part.
func wantCode(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %q lacks %q", what, err, p)
		}
	}
}

const (
	snw = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER
	mnr = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY
)

// An operator's claim with no node goes to the one node whose node plugin
// is healthy, ready at once (no controller publish); a second write claim
// of the single-writer volume is refused with ResourceExhausted naming the
// claim in the way; release, then the node's unpublish report, frees it,
// and the volume can be claimed again. Asked of a follower, the writes
// reach the leader.
func TestOperatorClaimReleaseFrees(t *testing.T) {
	cc := newClaimCluster(t, 3, false)
	cc.volume(t, "data", snw)
	follower := cc.tc.followers(cc.s)[0]
	claims := pb.NewClaimsClient(cc.tc.conn(follower))

	resp, err := claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data"})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.GetClaim()
	if c.GetNodeId() != cc.n1.GetId() || c.GetState() != pb.ClaimState_CLAIM_STATE_READY || !c.GetOperator() ||
		c.GetMode() != pb.ClaimMode_CLAIM_MODE_WRITE || c.GetAccessMode() != snw || resp.GetAttachment() != nil {
		t.Fatalf("claim %v, attachment %v", c, resp.GetAttachment())
	}
	if want := "csi/publish/" + c.GetId() + "/data"; resp.GetPublishPath() != want {
		t.Errorf("publish path %q, want %q", resp.GetPublishPath(), want)
	}

	_, err = claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data", NodeId: cc.n1.GetId(), Mode: pb.ClaimMode_CLAIM_MODE_WRITE})
	wantCode(t, "second writer", err, codes.ResourceExhausted, `volume "data"`, c.GetId(), "single-node-writer")

	rel, err := claims.Release(ctx10s(t), &pb.ClaimReleaseRequest{ClaimId: c.GetId()})
	if err != nil || rel.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
		t.Fatalf("release: %v, %v", rel, err)
	}
	// Released twice: the state machine's idempotence, no error.
	if _, err := claims.Release(ctx10s(t), &pb.ClaimReleaseRequest{ClaimId: c.GetId()}); err != nil {
		t.Fatalf("release again: %v", err)
	}
	// A releasing claim still holds the volume until the node unpublished.
	_, err = claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data"})
	wantCode(t, "claim while releasing", err, codes.FailedPrecondition, `volume "data"`, "no free claim", "releasing")

	up, err := claims.ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: cc.n1.GetId(), ClaimId: c.GetId(),
		State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED})
	if err != nil || up.GetClaim() != nil {
		t.Fatalf("node-detached: %v, %v (no attachment: the claim is freed)", up, err)
	}
	waitApplied(t, follower, up.GetMeta().GetIndex())
	_, err = claims.Get(ctx10s(t), &pb.ClaimGetRequest{ClaimId: c.GetId()})
	wantCode(t, "freed claim", err, codes.NotFound, c.GetId())
	again, err := claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data", Mode: pb.ClaimMode_CLAIM_MODE_READ})
	if err != nil || again.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_READY {
		t.Fatalf("claim once freed: %v, %v", again, err)
	}
	_, err = claims.Release(ctx10s(t), &pb.ClaimReleaseRequest{ClaimId: c.GetId()})
	wantCode(t, "release of a freed claim", err, codes.NotFound, c.GetId())
}

func waitApplied(t *testing.T, s *Server, index uint64) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if s.raft.AppliedIndex() < index {
			return errors.New("not yet applied")
		}
		return nil
	})
}

// The refusals of an operator's claim, each with its code and naming the
// volume and the node it is about.
func TestOperatorClaimRefusals(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	cc.volume(t, "data", snw)
	cc.volume(t, "ro", mnr)
	n1, n2 := cc.n1.GetId(), cc.n2.GetId()
	for _, tt := range []struct {
		name  string
		req   *pb.ClaimCreateRequest
		code  codes.Code
		parts []string
	}{
		{"no volume", &pb.ClaimCreateRequest{}, codes.InvalidArgument, []string{"volume_id is required"}},
		{"unknown volume", &pb.ClaimCreateRequest{VolumeId: "nope"}, codes.NotFound, []string{`volume "nope"`}},
		{"bad mode", &pb.ClaimCreateRequest{VolumeId: "data", Mode: 7}, codes.InvalidArgument, []string{`volume "data"`, "read or write"}},
		{"write on a reader-only volume", &pb.ClaimCreateRequest{VolumeId: "ro", Mode: pb.ClaimMode_CLAIM_MODE_WRITE}, codes.InvalidArgument,
			[]string{`volume "ro"`, "write claim", "multi-node-reader-only"}},
		{"unknown node", &pb.ClaimCreateRequest{VolumeId: "data", NodeId: "0b0b0b0b-0000-4000-8000-000000000000"}, codes.NotFound,
			[]string{`volume "data"`, "0b0b0b0b-0000-4000-8000-000000000000"}},
		{"node plugin unhealthy", &pb.ClaimCreateRequest{VolumeId: "data", NodeId: n2}, codes.FailedPrecondition,
			[]string{`volume "data"`, n2, `csi plugin "hp" is unhealthy (probe: not ready)`}},
	} {
		_, err := cc.claims.Claim(ctx10s(t), tt.req)
		wantCode(t, tt.name, err, tt.code, tt.parts...)
	}

	// A node without the plugin; then no node left at all: each reason given.
	updateCSI(t, pb.NewCSIPluginsClient(cc.tc.conn(cc.s)), &pb.NodeCSIUpdateRequest{NodeId: n2})
	_, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data", NodeId: n2})
	wantCode(t, "node without the plugin", err, codes.FailedPrecondition, n2, `runs no node instance of csi plugin "hp"`)
	if _, err := cc.s.raftApply(ctx10s(t), fsm.NodeFence, &pb.NodeFenceCommand{NodeId: n1, Fenced: true}); err != nil {
		t.Fatal(err)
	}
	_, err = cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data", NodeId: n1})
	wantCode(t, "fenced node", err, codes.FailedPrecondition, n1, "fenced")
	_, err = cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data"})
	wantCode(t, "no node", err, codes.FailedPrecondition, `volume "data"`, "no node can take", n1+" (n1) is fenced")
	if c, _ := cc.s.fsm.State().ClaimsByVolume(nil, "data"); len(c) != 0 {
		t.Fatalf("refused claims were stored: %v", c)
	}

	// Releases: unknown, blank, an alloc's claim, the wrong volume.
	_, err = cc.claims.Release(ctx10s(t), &pb.ClaimReleaseRequest{ClaimId: "c-none"})
	wantCode(t, "release unknown", err, codes.NotFound, `"c-none"`)
	_, err = cc.claims.Release(ctx10s(t), &pb.ClaimReleaseRequest{})
	wantCode(t, "release blank", err, codes.InvalidArgument, "claim_id is required")
	if _, err := cc.s.raftApply(ctx10s(t), fsm.NodeFence, &pb.NodeFenceCommand{NodeId: n1}); err != nil {
		t.Fatal(err)
	}
	a := cc.placeWithClaim(t, "web", n1, "data", false)
	_, err = cc.claims.Release(ctx10s(t), &pb.ClaimReleaseRequest{ClaimId: "claim-" + a})
	wantCode(t, "release of an alloc's claim", err, codes.InvalidArgument, a, "released when it stops")
	_, err = cc.claims.Release(ctx10s(t), &pb.ClaimReleaseRequest{ClaimId: "claim-" + a, VolumeId: "ro"})
	wantCode(t, "release on the wrong volume", err, codes.NotFound, `not of volume "ro"`)
}

// Until every server has recorded a version that knows the claim
// commands, nothing is proposed.
func TestOperatorClaimWaitsForEveryServersVersion(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion("0.0.9"))
	s := tc.servers[0]
	claims := pb.NewClaimsClient(tc.conn(s))
	testutil.WaitFor(t, 10*time.Second, func() error {
		_, err := claims.Release(ctx10s(t), &pb.ClaimReleaseRequest{ClaimId: "c1"})
		if status.Code(err) == codes.NotFound {
			return nil // the claim is looked up before the version check
		}
		return err
	})
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: &pb.Volume{Id: "v", PluginId: "hp",
		Capabilities: []*pb.VolumeCapability{{AccessMode: snw, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}}); err != nil {
		t.Fatal(err)
	}
	_, err := claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "v"})
	wantCode(t, "claim with a 0.0.9 server", err, codes.FailedPrecondition, "runs 0.0.9; upgrade it")
}

func TestClaimsMethodsHaveRoutes(t *testing.T) {
	for _, m := range methodNames(pb.Claims_ServiceDesc.Methods) {
		full := "/" + pb.Claims_ServiceDesc.ServiceName + "/" + m
		if _, ok := routes[full]; !ok {
			t.Errorf("%s has no forwarding route", full)
		}
		if _, err := newReply(full); err != nil {
			t.Errorf("newReply(%s): %v", full, err)
		}
	}
}

func TestClaimSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		endpoints.ErrClaimNodeUnfit:      codes.FailedPrecondition,
		endpoints.ErrNoClaimNode:         codes.FailedPrecondition,
		endpoints.ErrVolumeNotClaimable:  codes.FailedPrecondition,
		endpoints.ErrInvalidClaimRequest: codes.InvalidArgument,
		endpoints.ErrClaimNotYours:       codes.PermissionDenied,
		endpoints.ErrVolumeNotRequested:  codes.PermissionDenied,
	})
}

// placeWithClaim registers job (one group "g" asking for volume, per_alloc
// when perAlloc) and places its alloc at index 0 on node with the write
// claim "claim-<alloc>" the plan reserves, as the scheduler's plan does.
// It returns the alloc ID.
func (cc *claimCluster) placeWithClaim(t *testing.T, job, node, volume string, perAlloc bool) string {
	t.Helper()
	source := volume
	if perAlloc {
		source = strings.TrimSuffix(volume, "[0]")
	}
	j := serviceJob(job, 1)
	j.Groups[0].Volumes = map[string]*pb.VolumeRequest{"store": {Name: "store", Type: "csi", Source: source, PerAlloc: perAlloc}}
	if _, err := cc.s.raftApply(ctx10s(t), fsm.JobRegister, &pb.JobRegisterCommand{Job: j}); err != nil {
		t.Fatal(err)
	}
	stored, _ := cc.s.fsm.State().JobByID(nil, job)
	alloc := "a-" + job
	c := &pb.Claim{Id: "claim-" + alloc, VolumeId: volume, AllocId: alloc, NodeId: node, Mode: pb.ClaimMode_CLAIM_MODE_WRITE,
		AccessMode: snw, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}
	res, err := cc.s.raftApplyResult(ctx10s(t), fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e-" + job, JobId: job,
		JobVersion: stored.GetVersion(),
		Allocs: []*pb.Allocation{{Id: alloc, Name: job + ".g[0]", NodeId: node, JobId: job, JobVersion: stored.GetVersion(), TaskGroup: "g",
			DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING,
			Resources: &pb.AllocResources{CpuMhz: 10, MemoryMb: 10}}},
		Claims: []*pb.Claim{c}}})
	if err != nil {
		t.Fatal(err)
	}
	if pr, _ := res.Response.(*pb.PlanResult); pr.GetAppliedClaims() != 1 {
		t.Fatalf("plan of %s: %v", job, pr)
	}
	return alloc
}

// A client asks for its alloc's claim by IDs only; the server reads the
// alloc, its group and the claim itself. Asked by another node, for a
// volume the alloc's group does not ask for, or by claim ID from the wrong
// node, it refuses with PermissionDenied and hands out no secret.
func TestClientClaimTrustsOnlyItsOwnState(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	cc.volume(t, "data", snw)
	cc.volume(t, "other", snw)
	cc.volume(t, "shard[0]", snw)
	n1, n2 := cc.n1.GetId(), cc.n2.GetId()
	a := cc.placeWithClaim(t, "web", n1, "data", false)

	resp, err := cc.claims.ClientClaim(ctx10s(t), &pb.ClientClaimRequest{NodeId: n1, AllocId: a, VolumeId: "data"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetVolume().GetSecrets()["token"] != "s3cr3t-data" || resp.GetClaim().GetId() != "claim-"+a ||
		resp.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_READY || resp.GetRequest().GetSource() != "data" {
		t.Fatalf("client claim: %v", resp)
	}

	// A second alloc on n2 whose group asks for "other": its node asks
	// for "data", held by the first alloc on n1 — by its own alloc, by the
	// first alloc, and by the first alloc's claim ID.
	b := cc.placeWithClaim(t, "api", n1, "other", false)
	for _, tt := range []struct {
		name  string
		req   *pb.ClientClaimRequest
		code  codes.Code
		parts []string
	}{
		{"another node's alloc", &pb.ClientClaimRequest{NodeId: n2, AllocId: a, VolumeId: "data"}, codes.PermissionDenied,
			[]string{a, "runs on node " + n1, n2}},
		{"a volume the group does not ask for", &pb.ClientClaimRequest{NodeId: n1, AllocId: b, VolumeId: "data"}, codes.PermissionDenied,
			[]string{b, `asks for no volume "data"`}},
		{"another node's claim by ID", &pb.ClientClaimRequest{NodeId: n2, ClaimId: "claim-" + a}, codes.PermissionDenied, []string{n1, n2}},
		{"an unknown alloc", &pb.ClientClaimRequest{NodeId: n1, AllocId: "nope", VolumeId: "data"}, codes.NotFound, []string{`"nope"`}},
		{"no node", &pb.ClientClaimRequest{AllocId: a, VolumeId: "data"}, codes.InvalidArgument, []string{"node_id"}},
		{"alloc without volume", &pb.ClientClaimRequest{NodeId: n1, AllocId: a}, codes.InvalidArgument, []string{"alloc_id and volume_id"}},
		{"claim ID of another volume", &pb.ClientClaimRequest{NodeId: n1, ClaimId: "claim-" + a, VolumeId: "other"}, codes.InvalidArgument,
			[]string{`not alloc "" on volume "other"`}},
	} {
		got, err := cc.claims.ClientClaim(ctx10s(t), tt.req)
		wantCode(t, tt.name, err, tt.code, tt.parts...)
		if got != nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: answered %v / %v", tt.name, got, err)
		}
	}

	// per_alloc: the alloc at index 0 claims "shard[0]", and the request
	// is found through the group's source.
	p := cc.placeWithClaim(t, "db", n1, "shard[0]", true)
	resp, err = cc.claims.ClientClaim(ctx10s(t), &pb.ClientClaimRequest{NodeId: n1, AllocId: p, VolumeId: "shard[0]"})
	if err != nil || !resp.GetRequest().GetPerAlloc() || resp.GetVolume().GetId() != "shard[0]" {
		t.Fatalf("per_alloc claim: %v, %v", resp, err)
	}

	// An operator's claim on n1, by claim ID; not from n2.
	op, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "shard[0]", Mode: pb.ClaimMode_CLAIM_MODE_READ})
	if err != nil {
		t.Fatal(err)
	}
	resp, err = cc.claims.ClientClaim(ctx10s(t), &pb.ClientClaimRequest{NodeId: n1, ClaimId: op.GetClaim().GetId()})
	if err != nil || resp.GetRequest() != nil || resp.GetVolume().GetSecrets()["token"] != "s3cr3t-shard[0]" {
		t.Fatalf("operator claim for its node: %v, %v", resp, err)
	}
	_, err = cc.claims.ClientClaim(ctx10s(t), &pb.ClientClaimRequest{NodeId: n2, ClaimId: op.GetClaim().GetId()})
	wantCode(t, "operator claim from another node", err, codes.PermissionDenied, op.GetClaim().GetId())
	if errcode.Code(err) != codes.PermissionDenied && status.Code(err) != codes.PermissionDenied {
		t.Fatal(err)
	}
}

// A client waiting on a reserved claim (min_index) is answered when the
// attach reconciler's outcome lands: ready, with the publish context.
func TestClientClaimWaitsUntilReady(t *testing.T) {
	cc := newClaimCluster(t, 1, true)
	cc.volume(t, "data", snw)
	n1 := cc.n1.GetId()
	a := cc.placeWithClaim(t, "web", n1, "data", false)
	first, err := cc.claims.ClientClaim(ctx10s(t), &pb.ClientClaimRequest{NodeId: n1, AllocId: a, VolumeId: "data"})
	if err != nil {
		t.Fatal(err)
	}
	if first.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_RESERVED || first.GetAttachmentState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHING {
		t.Fatalf("before the publish: %v", first)
	}
	type answer struct {
		resp *pb.ClientClaimResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := cc.claims.ClientClaim(ctx, &pb.ClientClaimRequest{NodeId: n1, AllocId: a, VolumeId: "data",
			Query: &pb.QueryOptions{MinIndex: first.GetMeta().GetIndex(), MaxWaitMs: 30_000}})
		done <- answer{r, err}
	}()
	// Unrelated writes do not answer the wait: another volume registered.
	cc.volume(t, "unrelated", snw)
	if _, err := cc.s.raftApply(ctx10s(t), fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "data", NodeId: n1,
		State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED, ControllerNodeId: n1, PublishContext: map[string]string{"device": "/dev/xvdb"}}); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	r := got.resp
	if r.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_READY || r.GetAttachmentState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHED ||
		r.GetPublishContext()["device"] != "/dev/xvdb" || r.GetMeta().GetIndex() <= first.GetMeta().GetIndex() {
		t.Fatalf("after the publish: %v", r)
	}
}

// A client reports its claim's progress: published (in-use), a failed try
// (recorded once per attempt), unpublished (node-detached) once released;
// another node's report is refused; a detach report for a claim already
// freed is done.
func TestClientClaimUpdateReportsProgress(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	cc.volume(t, "data", snw)
	n1, n2 := cc.n1.GetId(), cc.n2.GetId()
	a := cc.placeWithClaim(t, "web", n1, "data", false)
	report := func(node string, state pb.ClaimState, verr *pb.VolumeError) (*pb.ClientClaimUpdateResponse, error) {
		return cc.claims.ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: node, AllocId: a, VolumeId: "data", State: state, Error: verr})
	}
	_, err := report(n2, pb.ClaimState_CLAIM_STATE_IN_USE, nil)
	wantCode(t, "another node's report", err, codes.PermissionDenied, a, n2)
	_, err = report(n1, pb.ClaimState_CLAIM_STATE_RELEASING, nil)
	wantCode(t, "a client moving to releasing", err, codes.InvalidArgument, "not releasing")

	failed := &pb.VolumeError{Message: "NodeStage: mount failed", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL, Code: pb.GrpcCode(codes.Internal)}
	up, err := report(n1, pb.ClaimState_CLAIM_STATE_READY, failed)
	if err != nil || up.GetClaim().GetAttempts() != 1 || up.GetClaim().GetLastError().GetMessage() != "NodeStage: mount failed" {
		t.Fatalf("failed try: %v, %v", up, err)
	}
	_, err = report(n1, pb.ClaimState_CLAIM_STATE_IN_USE, failed)
	wantCode(t, "an error with another state", err, codes.InvalidArgument, "current state")
	up, err = report(n1, pb.ClaimState_CLAIM_STATE_IN_USE, nil)
	if err != nil || up.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_IN_USE || up.GetClaim().GetLastError() != nil {
		t.Fatalf("in-use: %v, %v", up, err)
	}
	// Not released yet: the state machine refuses the detach.
	_, err = report(n1, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, nil)
	wantCode(t, "detach before release", err, codes.FailedPrecondition, "released before it is detached")

	// The alloc stops (its client says complete): the claim is releasing.
	if _, err := cc.s.raftApply(ctx10s(t), fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: n1,
		Updates: []*pb.AllocClientUpdate{{AllocId: a, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := cc.s.fsm.State().ClaimByID(nil, "claim-"+a); c.GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
		t.Fatalf("after the alloc completed: %v", c)
	}
	up, err = report(n1, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, nil)
	if err != nil || up.GetClaim() != nil {
		t.Fatalf("node-detached: %v, %v (no attachment: freed)", up, err)
	}
	if _, err := report(n1, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, nil); err != nil {
		t.Fatalf("node-detached sent again: %v", err)
	}
	_, err = report(n1, pb.ClaimState_CLAIM_STATE_IN_USE, nil)
	wantCode(t, "in-use of a freed claim", err, codes.NotFound, "data")
}

// An alloc this server does not know is NotFound at once without
// min_index; with a min_index this server's state has not passed, the
// query waits for it (the client heard of the alloc from a server ahead
// of this one) and answers once it is placed.
func TestClientClaimWaitsForAnAllocItDoesNotKnowYet(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	cc.volume(t, "data", snw)
	n1 := cc.n1.GetId()
	_, err := cc.claims.ClientClaim(ctx10s(t), &pb.ClientClaimRequest{NodeId: n1, AllocId: "a-web", VolumeId: "data"})
	wantCode(t, "unknown alloc", err, codes.NotFound, `"a-web"`)

	// The index the client passes: where the server it heard from was.
	// Nothing comes: it waits out its wait, then answers NotFound.
	idx := cc.s.raft.AppliedIndex()
	start := time.Now()
	_, err = cc.claims.ClientClaim(ctx10s(t), &pb.ClientClaimRequest{NodeId: n1, AllocId: "a-web", VolumeId: "data",
		Query: &pb.QueryOptions{MinIndex: idx, MaxWaitMs: 100}})
	wantCode(t, "unknown alloc after the wait", err, codes.NotFound, `"a-web"`)
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Fatalf("answered NotFound after %s: it did not wait for the alloc", waited)
	}
	type answer struct {
		resp *pb.ClientClaimResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := cc.claims.ClientClaim(ctx10s(t), &pb.ClientClaimRequest{NodeId: n1, AllocId: "a-web", VolumeId: "data",
			Query: &pb.QueryOptions{MinIndex: idx, MaxWaitMs: 10_000}})
		done <- answer{r, err}
	}()
	cc.placeWithClaim(t, "web", n1, "data", false)
	got := <-done
	if got.err != nil || got.resp.GetClaim().GetAllocId() != "a-web" {
		t.Fatalf("after the placement: %v, %v", got.resp, got.err)
	}
}

// With a plugin that requires controller publish, an operator's claim is
// reserved with its attachment attaching; a blocking Get of it answers
// when the attach reconciler's outcome lands, ready.
func TestOperatorClaimWaitsForItsAttachment(t *testing.T) {
	cc := newClaimCluster(t, 1, true)
	cc.volume(t, "data", snw)
	resp, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data"})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.GetClaim()
	if c.GetState() != pb.ClaimState_CLAIM_STATE_RESERVED || resp.GetAttachment().GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHING {
		t.Fatalf("claim %v, attachment %v", c, resp.GetAttachment())
	}
	done := make(chan *pb.ClaimGetResponse, 1)
	go func() {
		r, err := cc.claims.Get(ctx10s(t), &pb.ClaimGetRequest{ClaimId: c.GetId(), Query: &pb.QueryOptions{MinIndex: resp.GetMeta().GetIndex()}})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	cc.volume(t, "unrelated", snw)
	if _, err := cc.s.raftApply(ctx10s(t), fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "data", NodeId: c.GetNodeId(),
		State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED, ControllerNodeId: c.GetNodeId()}); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_READY || got.GetAttachment().GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHED {
		t.Fatalf("after the publish: %v", got)
	}
}

// The node choice: only nodes within the volume's topology and under their
// plugin's max volumes; among those, one already holding claims of the
// volume before the lowest ID.
func TestOperatorClaimNodeChoice(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	n1, n2 := cc.n1.GetId(), cc.n2.GetId()
	csiClient := pb.NewCSIPluginsClient(cc.tc.conn(cc.s))
	updateCSI(t, csiClient, &pb.NodeCSIUpdateRequest{NodeId: n1, Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true,
		NodeInfo: &pb.CSINodeInfo{AccessibleTopology: map[string]string{"zone": "a"}}}}})
	updateCSI(t, csiClient, &pb.NodeCSIUpdateRequest{NodeId: n2, Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true,
		NodeInfo: &pb.CSINodeInfo{AccessibleTopology: map[string]string{"zone": "b"}, MaxVolumes: 1}}}})

	zoned := &pb.Volume{Id: "zoned", PluginId: "hp", AccessibleTopology: []*pb.Topology{{Segments: map[string]string{"zone": "b"}}},
		Capabilities: []*pb.VolumeCapability{{AccessMode: snw, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}
	if _, err := cc.s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: zoned}); err != nil {
		t.Fatal(err)
	}
	_, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "zoned", NodeId: n1})
	wantCode(t, "outside the topology", err, codes.FailedPrecondition, n1, `outside volume "zoned"'s topology`)
	got, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "zoned"})
	if err != nil || got.GetClaim().GetNodeId() != n2 {
		t.Fatalf("zoned volume: %v, %v; want node %s", got, err, n2)
	}
	// n2 holds its one volume: another goes to n1, and is refused on n2.
	cc.volume(t, "other", pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER)
	_, err = cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "other", NodeId: n2})
	wantCode(t, "max volumes", err, codes.FailedPrecondition, n2, `holds 1 volumes of csi plugin "hp", its max`)
	got, err = cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "other"})
	if err != nil || got.GetClaim().GetNodeId() != n1 {
		t.Fatalf("other: %v, %v; want node %s", got, err, n1)
	}
	// Max volumes lifted: a multi-node volume claimed on n2 first goes
	// there again, though n1 sorts first.
	updateCSI(t, csiClient, &pb.NodeCSIUpdateRequest{NodeId: n2, Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true}}})
	cc.volume(t, "shared", pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER)
	if _, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "shared", NodeId: n2}); err != nil {
		t.Fatal(err)
	}
	got, err = cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "shared", Mode: pb.ClaimMode_CLAIM_MODE_READ})
	if err != nil || got.GetClaim().GetNodeId() != n2 || got.GetClaim().GetAccessMode() != pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER {
		t.Fatalf("shared: %v, %v; want node %s", got, err, n2)
	}
}

// A report of the state the claim is in already — a restarted client's
// in-use for every volume it holds published, a node-detached sent again
// while the attachment detaches — is answered with the claim as it is,
// without a raft write, also when a follower takes it (it goes to the
// leader, whose applied state answers); a report that moves the claim is
// still written.
func TestClientClaimUpdateOfTheCurrentStateWritesNothing(t *testing.T) {
	cc := newClaimCluster(t, 3, true)
	viaFollower := pb.NewClaimsClient(cc.tc.conn(cc.tc.followers(cc.s)[0]))
	cc.volume(t, "data", snw)
	n1 := cc.n1.GetId()
	a := cc.placeWithClaim(t, "web", n1, "data", false)
	if _, err := cc.s.raftApply(ctx10s(t), fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "data", NodeId: n1,
		State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED, CsiNodeId: "csi-n1", ControllerNodeId: n1}); err != nil {
		t.Fatal(err)
	}
	report := func(state pb.ClaimState) (*pb.ClientClaimUpdateResponse, uint64) {
		t.Helper()
		before := cc.s.raft.LastIndex()
		up, err := cc.claims.ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: n1, AllocId: a, VolumeId: "data", State: state})
		if err != nil {
			t.Fatalf("report %s: %v", state, err)
		}
		return up, cc.s.raft.LastIndex() - before
	}
	up, writes := report(pb.ClaimState_CLAIM_STATE_IN_USE)
	if writes != 1 || up.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_IN_USE {
		t.Fatalf("first in-use: %d raft writes, claim %v; want 1 and in-use", writes, up.GetClaim())
	}
	inUseIndex := up.GetClaim().GetModifyIndex()
	for i := range 3 {
		up, writes = report(pb.ClaimState_CLAIM_STATE_IN_USE)
		if writes != 0 || up.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_IN_USE || up.GetMeta().GetIndex() != inUseIndex {
			t.Fatalf("in-use again (%d): %d raft writes, claim %v, index %d; want none, in-use, %d", i, writes, up.GetClaim(), up.GetMeta().GetIndex(), inUseIndex)
		}
	}
	before := cc.s.raft.LastIndex()
	up, err := viaFollower.ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: n1, AllocId: a, VolumeId: "data", State: pb.ClaimState_CLAIM_STATE_IN_USE})
	if err != nil || cc.s.raft.LastIndex() != before || up.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_IN_USE {
		t.Fatalf("in-use again through a follower: %v, %v, %d raft writes; want in-use and none", up, err, cc.s.raft.LastIndex()-before)
	}
	// A failed try in the current state is news: written.
	failed := &pb.VolumeError{Message: "probe: not ready", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN, Code: pb.GrpcCode(codes.Unavailable)}
	before = cc.s.raft.LastIndex()
	up, err = cc.claims.ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: n1, AllocId: a, VolumeId: "data",
		State: pb.ClaimState_CLAIM_STATE_IN_USE, Error: failed})
	if err != nil || cc.s.raft.LastIndex() == before || up.GetClaim().GetAttempts() != 1 {
		t.Fatalf("failed try in the current state: %v, %v, %d writes", up, err, cc.s.raft.LastIndex()-before)
	}

	// Released: the node's detach report is written once; the attachment
	// is still there (detaching), so the claim stays node-detached and the
	// same report again writes nothing.
	if _, err := cc.s.raftApply(ctx10s(t), fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: n1,
		Updates: []*pb.AllocClientUpdate{{AllocId: a, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}}}); err != nil {
		t.Fatal(err)
	}
	up, writes = report(pb.ClaimState_CLAIM_STATE_NODE_DETACHED)
	if writes != 1 || up.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
		t.Fatalf("node-detached: %d raft writes, claim %v; want 1 and node-detached", writes, up.GetClaim())
	}
	up, writes = report(pb.ClaimState_CLAIM_STATE_NODE_DETACHED)
	if writes != 0 || up.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
		t.Fatalf("node-detached again: %d raft writes, claim %v; want none", writes, up.GetClaim())
	}
	// Moving back is still refused, by the state machine as before.
	_, err = cc.claims.ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: n1, AllocId: a, VolumeId: "data", State: pb.ClaimState_CLAIM_STATE_IN_USE})
	wantCode(t, "in-use of a node-detached claim", err, codes.FailedPrecondition, "never move back")
}
