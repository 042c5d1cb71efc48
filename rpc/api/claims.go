package api

import (
	"context"
	"net/http"
	"net/url"

	"berth.dev/berth/rpc/pb"
)

// VolumeClaims is an operator's claims on CSI volumes (`berth volume claim`
// and `berth volume release`): c.VolumeClaims().Create(ctx, "data", "", read).
type VolumeClaims struct{ c *Client }

// VolumeClaims returns the claim endpoints.
func (c *Client) VolumeClaims() *VolumeClaims { return &VolumeClaims{c} }

// Create claims the volume for an operator on nodeID ("": the servers
// choose a node whose node plugin is healthy) with mode read or write
// (unspecified: write). The claim comes back as stored: ready, or reserved
// until the volume's controller publish to the node is done.
func (v *VolumeClaims) Create(ctx context.Context, volumeID, nodeID string, mode pb.ClaimMode) (*pb.ClaimCreateResponse, error) {
	out := &pb.ClaimCreateResponse{}
	req := &pb.ClaimCreateRequest{NodeId: nodeID, Mode: mode}
	return out, v.c.write(ctx, http.MethodPost, claimsPath(volumeID, ""), nil, req, out)
}

// Info reads a claim of the volume with its attachment; q.WaitIndex makes
// it wait for a change of either. A freed claim is not found (IsNotFound).
func (v *VolumeClaims) Info(ctx context.Context, volumeID, claimID string, q *QueryOptions) (*pb.ClaimGetResponse, *QueryMeta, error) {
	out := &pb.ClaimGetResponse{}
	meta, err := v.c.getJSON(ctx, claimsPath(volumeID, claimID), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// ByID reads a claim by its ID alone, whatever its volume.
func (v *VolumeClaims) ByID(ctx context.Context, claimID string, q *QueryOptions) (*pb.ClaimGetResponse, *QueryMeta, error) {
	out := &pb.ClaimGetResponse{}
	meta, err := v.c.getJSON(ctx, "/v1/volume/claim/"+url.PathEscape(claimID), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// List returns one page of every volume's claims in claim ID order, from
// q's NextToken on (a claim ID or a prefix of one: findID-style lookups).
func (v *VolumeClaims) List(ctx context.Context, q *QueryOptions) ([]*pb.Claim, *QueryMeta, error) {
	return getList(ctx, v.c, "/v1/volumes/claims", q, func() *pb.Claim { return &pb.Claim{} })
}

// Release starts taking an operator's claim of the volume down: it is
// releasing until its node has unpublished it, then freed.
func (v *VolumeClaims) Release(ctx context.Context, volumeID, claimID string) (*pb.ClaimReleaseResponse, error) {
	out := &pb.ClaimReleaseResponse{}
	return out, v.c.write(ctx, http.MethodDelete, claimsPath(volumeID, claimID), nil, nil, out)
}

func claimsPath(volumeID, claimID string) string {
	p := "/v1/volume/csi/" + url.PathEscape(volumeID) + "/claims"
	if claimID != "" {
		p += "/" + url.PathEscape(claimID)
	}
	return p
}
