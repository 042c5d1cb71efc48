package agent

import (
	"context"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/pb"
)

// Operator claims over HTTP. The list of a volume's claims is
// GET /v1/volume/csi/{id}/claims (http_volumes.go); these are the writes,
// the read of one claim, which `berth volume claim` waits on, and the list
// of every volume's claims.

// volumeClaimCreate is POST (or PUT) /v1/volume/csi/{id}/claims: an
// operator's claim of the volume; the body is a ClaimCreateRequest
// ({"node_id": "...", "mode": "read"}, both optional; a volume_id must be the
// path's). The answer is the claim as stored with its attachment and the
// publish path relative to the node's data_dir.
func (a *Agent) volumeClaimCreate(w http.ResponseWriter, r *http.Request) error {
	req := &pb.ClaimCreateRequest{}
	if err := decodeBody(w, r, req, true); err != nil {
		return err
	}
	if err := samePathID("volume_id", req.GetVolumeId(), r.PathValue("id")); err != nil {
		return err
	}
	req.VolumeId = r.PathValue("id")
	var resp *pb.ClaimCreateResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewClaimsClient(c).Claim(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// volumeClaimGet is GET /v1/volume/csi/{id}/claims/{claim}: one claim with
// its attachment; a blocking query (?index=&wait=) wakes when either
// changes. A claim of another volume is not found under this one.
func (a *Agent) volumeClaimGet(w http.ResponseWriter, r *http.Request) error {
	return a.claimGet(w, r, r.PathValue("id"))
}

// claimByID is GET /v1/volume/claim/{claim}: the claim found by its ID
// alone, for `berth volume release CLAIM`, which names no volume.
func (a *Agent) claimByID(w http.ResponseWriter, r *http.Request) error {
	return a.claimGet(w, r, "")
}

func (a *Agent) claimGet(w http.ResponseWriter, r *http.Request, volumeID string) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	req := &pb.ClaimGetRequest{ClaimId: r.PathValue("claim"), Query: q}
	var resp *pb.ClaimGetResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewClaimsClient(c).Get(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	if volumeID != "" && resp.GetClaim().GetVolumeId() != volumeID {
		return status.Errorf(codes.NotFound, "claim %q is a claim of volume %q, not of volume %q", req.GetClaimId(), resp.GetClaim().GetVolumeId(), volumeID)
	}
	setQueryHeaders(w, resp.GetMeta())
	resp.Meta = nil
	return writeProto(w, resp)
}

// volumeClaimRelease is DELETE /v1/volume/csi/{id}/claims/{claim}: release
// an operator's claim of the volume (releasing; freed once its node has
// unpublished it).
func (a *Agent) volumeClaimRelease(w http.ResponseWriter, r *http.Request) error {
	req := &pb.ClaimReleaseRequest{ClaimId: r.PathValue("claim"), VolumeId: r.PathValue("id")}
	var resp *pb.ClaimReleaseResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewClaimsClient(c).Release(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// claimList is GET /v1/volumes/claims: every volume's claims, one page in
// claim ID order from ?next_token= on (a claim ID, or a prefix of one), so
// `berth volume release` takes a unique prefix of a claim ID as other
// commands take one of an alloc's or a node's; filtered by ?operator=true
// (operators' claims only), ?volume_id=, ?node_id= and ?state=. Blocking.
func (a *Agent) claimList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	op, err := queryBool(r, "operator")
	if err != nil {
		return err
	}
	st, err := queryEnum(r, "state", pb.ClaimState(0).Descriptor())
	if err != nil {
		return err
	}
	v := r.URL.Query()
	req := &pb.VolumeClaimsRequest{Query: q, Operator: op, VolumeId: v.Get("volume_id"), NodeId: v.Get("node_id"), State: pb.ClaimState(st)}
	var resp *pb.VolumeClaimsResponse
	if err := a.volumes(r.Context(), func(ctx context.Context, c pb.VolumesClient) (err error) {
		resp, err = c.Claims(ctx, req)
		return err
	}); err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetClaims())
}
