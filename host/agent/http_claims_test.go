package agent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// fakeClaims serves Claims with one claim "c1" of volume "data" and
// records what the agent asked.
type fakeClaims struct {
	pb.UnimplementedClaimsServer
	mu   sync.Mutex
	reqs []proto.Message
}

func (f *fakeClaims) record(m proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, m)
}

func (f *fakeClaims) last() proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs[len(f.reqs)-1]
}

var fakeClaim = &pb.Claim{Id: "c1", VolumeId: "data", Operator: true, NodeId: "n1", Mode: pb.ClaimMode_CLAIM_MODE_READ,
	State: pb.ClaimState_CLAIM_STATE_RESERVED}

func (f *fakeClaims) Claim(_ context.Context, req *pb.ClaimCreateRequest) (*pb.ClaimCreateResponse, error) {
	f.record(req)
	if req.GetNodeId() == "full" {
		return nil, status.Errorf(codes.ResourceExhausted, "volume %q: no free claim on the volume", req.GetVolumeId())
	}
	return &pb.ClaimCreateResponse{Claim: fakeClaim, PublishPath: "csi/publish/c1/data", Meta: &pb.WriteMeta{Index: 42}}, nil
}

func (f *fakeClaims) Get(_ context.Context, req *pb.ClaimGetRequest) (*pb.ClaimGetResponse, error) {
	f.record(req)
	if req.GetClaimId() != "c1" {
		return nil, status.Errorf(codes.NotFound, "claim %q: claim not found", req.GetClaimId())
	}
	return &pb.ClaimGetResponse{Claim: fakeClaim, PublishPath: "csi/publish/c1/data", Meta: &pb.QueryMeta{Index: 43}}, nil
}

func (f *fakeClaims) Release(_ context.Context, req *pb.ClaimReleaseRequest) (*pb.ClaimReleaseResponse, error) {
	f.record(req)
	return &pb.ClaimReleaseResponse{Meta: &pb.WriteMeta{Index: 44}}, nil
}

func newFakeClaimsAgent(t *testing.T) (*fakeClaims, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeClaims{}
	gs := grpc.NewServer(rpc.ServerOptions()...)
	pb.RegisterClaimsServer(gs, f)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	a := &Agent{pool: rpc.NewPool(), rpcAddrs: []string{lis.Addr().String()}, logger: testutil.Logger(t)}
	t.Cleanup(a.pool.Close)
	srv := httptest.NewServer(a.routes())
	t.Cleanup(srv.Close)
	return f, srv.URL
}

// The claim endpoints pass the path's IDs (never a body's that differs),
// the query's blocking options, the write index, and refusals with their
// codes; a claim is not found under another volume's path.
func TestVolumeClaimEndpoints(t *testing.T) {
	f, url := newFakeClaimsAgent(t)

	r := call(t, url, "POST", "/v1/volume/csi/data/claims", `{"node_id": "n1", "mode": "read"}`)
	out := &pb.ClaimCreateResponse{}
	r.wantOK(t, out)
	got := f.last().(*pb.ClaimCreateRequest)
	if got.GetVolumeId() != "data" || got.GetNodeId() != "n1" || got.GetMode() != pb.ClaimMode_CLAIM_MODE_READ {
		t.Errorf("the server was asked %v", got)
	}
	if out.GetClaim().GetId() != "c1" || out.GetPublishPath() != "csi/publish/c1/data" || r.header.Get(HeaderIndex) != "42" {
		t.Errorf("answer %v, index %q", out, r.header.Get(HeaderIndex))
	}
	// No body at all: the server chooses node and mode.
	call(t, url, "PUT", "/v1/volume/csi/data/claims", "").wantOK(t, nil)
	if got := f.last().(*pb.ClaimCreateRequest); got.GetNodeId() != "" || got.GetVolumeId() != "data" {
		t.Errorf("empty body asked %v", got)
	}
	r = call(t, url, "POST", "/v1/volume/csi/data/claims", `{"volume_id": "other"}`)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `volume_id \"other\" differs from \"data\"`) {
		t.Errorf("body volume differing from the path: %d %s", r.status, r.body)
	}
	r = call(t, url, "POST", "/v1/volume/csi/data/claims", `{"mode": "exclusive"}`)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "mode") {
		t.Errorf("bad mode: %d %s", r.status, r.body)
	}
	r = call(t, url, "POST", "/v1/volume/csi/data/claims", `{"node_id": "full"}`)
	if r.status != http.StatusConflict || !strings.Contains(string(r.body), `"resource_exhausted"`) || !strings.Contains(string(r.body), `volume \"data\"`) {
		t.Errorf("refusal: %d %s", r.status, r.body)
	}

	get := &pb.ClaimGetResponse{}
	r = call(t, url, "GET", "/v1/volume/csi/data/claims/c1?index=40&wait=5s", "")
	r.wantOK(t, get)
	q := f.last().(*pb.ClaimGetRequest)
	if q.GetClaimId() != "c1" || q.GetQuery().GetMinIndex() != 40 || q.GetQuery().GetMaxWaitMs() != 5000 || r.header.Get(HeaderIndex) != "43" {
		t.Errorf("get asked %v, index %q", q, r.header.Get(HeaderIndex))
	}
	if get.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_RESERVED {
		t.Errorf("get answered %s", r.body)
	}
	r = call(t, url, "GET", "/v1/volume/csi/other/claims/c1", "")
	if r.status != http.StatusNotFound || !strings.Contains(string(r.body), `not of volume \"other\"`) {
		t.Errorf("claim under another volume: %d %s", r.status, r.body)
	}
	call(t, url, "GET", "/v1/volume/claim/c1", "").wantOK(t, get)
	if get.GetClaim().GetVolumeId() != "data" {
		t.Errorf("claim by ID: %v", get)
	}
	if r := call(t, url, "GET", "/v1/volume/claim/c9", ""); r.status != http.StatusNotFound {
		t.Errorf("unknown claim: %d %s", r.status, r.body)
	}

	r = call(t, url, "DELETE", "/v1/volume/csi/data/claims/c1", "")
	r.wantOK(t, nil)
	rel := f.last().(*pb.ClaimReleaseRequest)
	if rel.GetClaimId() != "c1" || rel.GetVolumeId() != "data" || r.header.Get(HeaderIndex) != "44" {
		t.Errorf("release asked %v, index %q", rel, r.header.Get(HeaderIndex))
	}
	if r := call(t, url, "PATCH", "/v1/volume/csi/data/claims/c1", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("PATCH: %d", r.status)
	}
}
