package server

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
// query.min_index it waits until one of the node's claims changes,
// appears or goes. Nothing but the claims is answered: the volume and its
// secrets come with ClientClaim, for the claim being published.
func (e *claimsEndpoint) ClientClaims(ctx context.Context, req *pb.ClientClaimsRequest) (*pb.ClientClaimsResponse, error) {
	if !uuid.Valid(req.GetNodeId()) {
		return nil, fmt.Errorf("%w: node_id %q is not a node ID", ErrInvalidClaimRequest, req.GetNodeId())
	}
	resp := &pb.ClientClaimsResponse{}
	meta, err := e.s.blockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		claims, err := st.ClaimsByNode(ws, req.GetNodeId())
		if err != nil {
			return 0, err
		}
		resp.Claims = resp.Claims[:0]
		for _, c := range claims {
			if c.GetOperator() {
				resp.Claims = append(resp.Claims, c)
			}
		}
		// The table's index moves when one of the node's claims goes,
		// which no remaining claim's modify index would show.
		return tablesIndex(st, fsm.TableClaims)
	})
	if err != nil {
		return nil, err
	}
	resp.Meta = meta
	return resp, nil
}
