package endpoints

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc/pb"
)

// ClientClaims lists the operators' claims held on the calling node, so
// its client publishes and tears them down as it does an alloc's (an
// operator's claim has no alloc for the client to learn it from). With
// alloc_id it lists that alloc's claims held on the node instead: a
// client that never ran a stopped alloc has no job to learn its volumes
// from, and takes down and reports what the alloc holds. With
// query.min_index it waits until one of the node's claims changes,
// appears or goes (with alloc_id: one of the alloc's claims or the alloc
// itself, the answer's index the later of the claims' and the allocs'
// tables). Nothing but the claims is answered: the volume and its
// secrets come with ClientClaim, for the claim being published.
func (e *claimsEndpoint) ClientClaims(ctx context.Context, req *pb.ClientClaimsRequest) (*pb.ClientClaimsResponse, error) {
	nodeID, allocID := req.GetNodeId(), req.GetAllocId()
	if !uuid.Valid(nodeID) {
		return nil, fmt.Errorf("%w: node_id %q is not a node ID", ErrInvalidClaimRequest, nodeID)
	}
	// alloc_id echoed tells the client this server listed the alloc's
	// claims (an older server ignores the field).
	resp := &pb.ClientClaimsResponse{AllocId: allocID}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		var claims []*pb.Claim
		var err error
		if allocID != "" {
			// The alloc is watched too: its caller waits for this server
			// to have applied the alloc as the caller saw it (min_index
			// from its modify index), which may change no claim.
			if _, err = st.AllocByID(ws, allocID); err == nil {
				claims, err = st.ClaimsByAlloc(ws, allocID)
			}
		} else {
			claims, err = st.ClaimsByNode(ws, nodeID)
		}
		if err != nil {
			return 0, err
		}
		resp.Claims = resp.Claims[:0]
		for _, c := range claims {
			// Another node's claims of the alloc (none: an alloc is on
			// one node) are not the caller's to see.
			if c.GetNodeId() == nodeID && (allocID != "" || c.GetOperator()) {
				resp.Claims = append(resp.Claims, c)
			}
		}
		// The table's index moves when one of the node's claims goes,
		// which no remaining claim's modify index would show.
		if allocID != "" {
			return tablesIndex(st, fsm.TableClaims, fsm.TableAllocs)
		}
		index, err := tablesIndex(st, fsm.TableClaims)
		return noOperatorClaimIndex(ws, index, req, resp), err
	})
	if err != nil {
		return nil, err
	}
	resp.Meta = meta
	return resp, nil
}
