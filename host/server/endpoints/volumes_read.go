package endpoints

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/volumespec"
	"berth.dev/berth/rpc/pb"
)

// Get reads one volume with its claims and attachments; a blocking query
// wakes on any change to them. A volume that is not registered is
// NotFound (a blocking Get waits for it to appear).
func (e *volumesEndpoint) Get(ctx context.Context, req *pb.VolumeGetRequest) (*pb.VolumeGetResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, fmt.Errorf("volume get: %w: volume_id is required", volumespec.ErrInvalidVolume)
	}
	resp := &pb.VolumeGetResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		resp.Volume = nil
		v, err := st.VolumeByID(ws, req.GetVolumeId())
		if err != nil || v == nil {
			if err == nil {
				return st.Index(fsm.TableVolumes)
			}
			return 0, err
		}
		if resp.Volume, err = view(ws, st, v); err != nil {
			return 0, err
		}
		return volumesIndex(st)
	})
	if err != nil {
		return nil, err
	}
	if resp.Volume == nil {
		return nil, fmt.Errorf("volume %q: %w", req.GetVolumeId(), fsm.ErrVolumeNotFound)
	}
	resp.Meta = meta
	return resp, nil
}

// List pages the volumes by ID, each with its claims and attachments:
// plugin_id keeps one plugin's, node_id those with a claim or an
// attachment on the node, prefix those whose ID starts with it.
func (e *volumesEndpoint) List(ctx context.Context, req *pb.VolumeListRequest) (*pb.VolumeListResponse, error) {
	n, err := PerPage(req.GetQuery())
	if err != nil {
		return nil, err
	}
	prefix := req.GetPrefix()
	from := max(req.GetQuery().GetNextToken(), prefix)
	resp := &pb.VolumeListResponse{}
	var next string
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		var onNode map[string]bool
		if id := req.GetNodeId(); id != "" {
			onNode = map[string]bool{}
			claims, err := st.ClaimsByNode(ws, id)
			if err != nil {
				return 0, err
			}
			for _, c := range claims {
				onNode[c.GetVolumeId()] = true
			}
			atts, err := st.AttachmentsByNode(ws, id)
			if err != nil {
				return 0, err
			}
			for _, a := range atts {
				onNode[a.GetVolumeId()] = true
			}
		}
		keep := func(v *pb.Volume) bool {
			return strings.HasPrefix(v.GetId(), prefix) &&
				(req.GetPluginId() == "" || v.GetPluginId() == req.GetPluginId()) &&
				(onNode == nil || onNode[v.GetId()])
		}
		vols, nextID, err := st.VolumesPage(ws, from, n, keep)
		if err != nil {
			return 0, err
		}
		resp.Volumes = resp.Volumes[:0]
		for _, v := range vols {
			vv, err := view(ws, st, v)
			if err != nil {
				return 0, err
			}
			resp.Volumes = append(resp.Volumes, vv)
		}
		if !strings.HasPrefix(nextID, prefix) {
			nextID = ""
		}
		next = nextID
		return volumesIndex(st)
	})
	if err != nil {
		return nil, err
	}
	meta.NextToken = next
	resp.Meta = meta
	return resp, nil
}

// Claims lists a volume's claims, paged by claim ID; without a volume_id,
// every volume's claims, in claim ID order, so a claim is found by a
// prefix of its ID (`berth volume release PREFIX`).
//
// operator, node_id and state keep only the claims that match each given.
func (e *volumesEndpoint) Claims(ctx context.Context, req *pb.VolumeClaimsRequest) (*pb.VolumeClaimsResponse, error) {
	keep := claimFilter(req)
	if req.GetVolumeId() == "" {
		return e.allClaims(ctx, req.GetQuery(), keep)
	}
	n, err := PerPage(req.GetQuery())
	if err != nil {
		return nil, err
	}
	resp := &pb.VolumeClaimsResponse{}
	var next string
	found := false
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		v, err := st.VolumeByID(ws, req.GetVolumeId())
		if err != nil {
			return 0, err
		}
		found = v != nil
		claims, err := st.ClaimsByVolume(ws, req.GetVolumeId())
		if err != nil {
			return 0, err
		}
		sortClaims(claims)
		resp.Claims, next = PageOf(claims, (*pb.Claim).GetId, req.GetQuery().GetNextToken(), n, keep)
		return volumesIndex(st)
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("volume %q: %w", req.GetVolumeId(), fsm.ErrVolumeNotFound)
	}
	meta.NextToken = next
	resp.Meta = meta
	return resp, nil
}

// allClaims is one page of every volume's claims, from the query's
// next_token (a claim ID, or a prefix of one) on.
func (e *volumesEndpoint) allClaims(ctx context.Context, q *pb.QueryOptions, keep func(*pb.Claim) bool) (*pb.VolumeClaimsResponse, error) {
	n, err := PerPage(q)
	if err != nil {
		return nil, err
	}
	resp := &pb.VolumeClaimsResponse{}
	var next string
	meta, err := e.s.BlockingRead(ctx, q, func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		claims, nextID, err := st.ClaimsPage(ws, q.GetNextToken(), n, keep)
		if err != nil {
			return 0, err
		}
		resp.Claims, next = claims, nextID
		return st.Index(fsm.TableClaims)
	})
	if err != nil {
		return nil, err
	}
	meta.NextToken = next
	resp.Meta = meta
	return resp, nil
}

// claimFilter is the request's filters as one test; nil keeps every claim.
func claimFilter(req *pb.VolumeClaimsRequest) func(*pb.Claim) bool {
	op, node, state := req.GetOperator(), req.GetNodeId(), req.GetState()
	if !op && node == "" && state == pb.ClaimState_CLAIM_STATE_UNSPECIFIED {
		return nil
	}
	return func(c *pb.Claim) bool {
		return (!op || c.GetOperator()) && (node == "" || c.GetNodeId() == node) &&
			(state == pb.ClaimState_CLAIM_STATE_UNSPECIFIED || c.GetState() == state)
	}
}

func sortClaims(cs []*pb.Claim) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].GetId() < cs[j-1].GetId(); j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}
