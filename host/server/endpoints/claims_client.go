package endpoints

import (
	"context"
	"errors"
	"fmt"

	"berth.dev/berth/internal/rules"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// The client's side of claims. A client names a claim of its node by
// (alloc, volume) or, for an operator's claim, by claim ID, and nothing
// else: which node the alloc is on and which claim it holds are read from
// this server's state. The answer to ClientClaim is the only one that
// carries a volume's secrets (its node plugin needs them), so a node gets
// them only for a claim of its own: the scheduler placed the alloc with
// that claim because its group asks for the volume.
//
// Nothing here reads the alloc's job once the claim is found: `job stop
// -purge` removes the job and its versions while the alloc still holds
// its claim, and the claim must still be published from, reported on and
// released. What the client needs of the group's request (read_only,
// mount options) travels on the claim (pb.Claim.request, set at
// placement). The job is read only for a claim an older server placed
// without it, and to tell why an alloc holds no claim of a volume.

var (
	// ErrClaimNotYours is returned by ClientClaim and ClientClaimUpdate when
	// the alloc or the claim named is on another node than the caller's.
	ErrClaimNotYours = errcode.New(codes.PermissionDenied, "the alloc or claim is not on the calling node")
	// ErrVolumeNotRequested is returned by ClientClaim and ClientClaimUpdate
	// when the alloc's group asks for no such volume.
	ErrVolumeNotRequested = errcode.New(codes.PermissionDenied, "the alloc's group does not ask for the volume")
)

// clientClaim is a claim of the calling node as this server's state has
// it: the claim, and for an alloc's claim the alloc (nil once collected).
type clientClaim struct {
	claim *pb.Claim
	alloc *pb.Allocation
}

// clientClaimOf resolves what a client names (nodeID, allocID, volumeID,
// claimID) to a claim of its node, refusing whatever does not check out.
// The claim is read with ws, so a blocking query wakes when it changes; the
// alloc is not (its own updates would wake it for nothing; when it becomes
// terminal its claims change in that apply).
// With goneAlloc an alloc's claim whose alloc was collected is answered
// (its node may still report the unpublish); otherwise it is NotFound.
func clientClaimOf(ws memdb.WatchSet, st *fsm.StateSnapshot, nodeID, allocID, volumeID, claimID string, goneAlloc bool) (*clientClaim, error) {
	switch {
	case !uuid.Valid(nodeID):
		return nil, fmt.Errorf("%w: node_id %q is not a node ID", ErrInvalidClaimRequest, nodeID)
	case claimID == "" && (allocID == "" || volumeID == ""):
		return nil, fmt.Errorf("%w: name a claim by alloc_id and volume_id, or by claim_id", ErrInvalidClaimRequest)
	}
	var c *pb.Claim
	var err error
	if claimID != "" {
		if c, err = st.ClaimByID(ws, claimID); err != nil {
			return nil, err
		}
		switch {
		case c == nil:
			return nil, fmt.Errorf("claim %q asked for by node %s (never reserved, or freed): %w", claimID, nodeID, fsm.ErrClaimNotFound)
		case allocID != "" && allocID != c.GetAllocId(), volumeID != "" && volumeID != c.GetVolumeId():
			return nil, fmt.Errorf("%w: claim %q is %s on volume %q, not alloc %q on volume %q", ErrInvalidClaimRequest, claimID,
				rules.Claimant(c), c.GetVolumeId(), allocID, volumeID)
		}
		allocID, volumeID = c.GetAllocId(), c.GetVolumeId()
	}
	out := &clientClaim{claim: c}
	if allocID != "" {
		a, err := st.AllocByID(nil, allocID)
		if err != nil {
			return nil, err
		}
		if a == nil && ws != nil {
			// Watch for it: a server behind the one that told the client
			// of the alloc has yet to apply it.
			if a, err = st.AllocByID(ws, allocID); err != nil {
				return nil, err
			}
		}
		switch {
		case a == nil && !goneAlloc:
			return nil, fmt.Errorf("alloc %q asking node %s for volume %q: %w", allocID, nodeID, volumeID, fsm.ErrAllocNotFound)
		case a != nil && a.GetNodeId() != nodeID:
			return nil, fmt.Errorf("alloc %q runs on node %s, not on node %s asking for volume %q: %w", allocID, a.GetNodeId(), nodeID, volumeID, ErrClaimNotYours)
		}
		out.alloc = a
		if c == nil {
			claims, err := st.ClaimsByAlloc(ws, allocID)
			if err != nil {
				return nil, err
			}
			for _, x := range claims {
				if x.GetVolumeId() == volumeID {
					c = x
				}
			}
			if c == nil {
				if a != nil {
					// A group that does not ask for the volume is refused
					// at once rather than waited on. A job purged since
					// tells nothing: the claim may be on its way.
					if _, err := groupVolumeRequest(st, a, volumeID); errors.Is(err, ErrVolumeNotRequested) {
						return nil, err
					}
				}
				return nil, fmt.Errorf("alloc %q on node %s holds no claim of volume %q (not yet placed with it, or freed): %w", allocID, nodeID, volumeID, fsm.ErrClaimNotFound)
			}
			out.claim = c
		}
	}
	if c.GetNodeId() != nodeID {
		return nil, fmt.Errorf("%s on volume %q is held on node %s, not on node %s: %w", rules.Claimant(c), c.GetVolumeId(), c.GetNodeId(), nodeID, ErrClaimNotYours)
	}
	return out, nil
}

// claimRequest is the group volume request an alloc's claim was placed
// for: the claim's own; for a claim an older server placed without it,
// the request of the alloc's group in the job version it runs while that
// version is stored, else none (the job was purged: the claim is being
// released, and its teardown needs no request).
func claimRequest(st *fsm.StateSnapshot, cc *clientClaim) (*pb.VolumeRequest, error) {
	if r := cc.claim.GetRequest(); r != nil || cc.alloc == nil {
		return r, nil
	}
	return groupVolumeRequest(st, cc.alloc, cc.claim.GetVolumeId())
}

// groupVolumeRequest returns the request of a's group, in the job version
// a runs, for volume volumeID, as placement sets it on a claim
// (scheduler.ClaimRequest: a per_alloc request's source with a's index;
// the first such name, writable when any writes), ErrVolumeNotRequested
// when the group asks for no such volume, and nothing when that version
// is no longer stored (purged, or past the versions kept). A version of
// a job created after a (`job stop -purge`, then another job registered
// under the ID: its versions start at 0 again) is not a's job, and
// counts as gone.
func groupVolumeRequest(st *fsm.StateSnapshot, a *pb.Allocation, volumeID string) (*pb.VolumeRequest, error) {
	job, err := st.JobVersion(nil, a.GetJobId(), a.GetJobVersion())
	if err != nil {
		return nil, err
	}
	if job == nil || job.GetCreateIndex() > a.GetCreateIndex() {
		return nil, nil
	}
	for _, g := range job.GetGroups() {
		if g.GetName() != a.GetTaskGroup() {
			continue
		}
		if req := scheduler.ClaimRequest(g, a.GetIndex(), volumeID); req != nil {
			return req, nil
		}
	}
	return nil, fmt.Errorf("alloc %q (job %q version %d, group %q) asks for no volume %q: %w", a.GetId(), a.GetJobId(), a.GetJobVersion(),
		a.GetTaskGroup(), volumeID, ErrVolumeNotRequested)
}

// ClientClaim answers a client the volume (secrets included), the claim and
// its attachment's publish context for a claim of its node. With
// query.min_index it waits until the claim, its volume or the volume's
// attachment to the node changes after it: a client waits for a reserved
// claim to become ready with no polling. An alloc or claim this server
// does not know is NotFound at once without min_index; with it, only once
// this server's allocs and claims are past min_index (a server behind
// the one the client heard of the alloc from waits to catch up). A claim
// freed meanwhile is answered NotFound.
func (e *claimsEndpoint) ClientClaim(ctx context.Context, req *pb.ClientClaimRequest) (*pb.ClientClaimResponse, error) {
	resp := &pb.ClientClaimResponse{}
	var unknown error
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		resp.Claim, unknown = nil, nil
		cc, err := clientClaimOf(ws, st, req.GetNodeId(), req.GetAllocId(), req.GetVolumeId(), req.GetClaimId(), false)
		if errcode.Code(err) == codes.NotFound {
			unknown = err
			return tablesIndex(st, fsm.TableAllocs, fsm.TableClaims)
		}
		if err != nil {
			return 0, err
		}
		c := cc.claim
		v, err := st.VolumeByID(ws, c.GetVolumeId())
		if err != nil {
			return 0, err
		}
		if v == nil {
			return 0, fmt.Errorf("volume %q of %s on node %s: %w", c.GetVolumeId(), rules.Claimant(c), c.GetNodeId(), fsm.ErrVolumeNotFound)
		}
		a, err := st.Attachment(ws, c.GetVolumeId(), c.GetNodeId())
		if err != nil {
			return 0, err
		}
		if resp.Request, err = claimRequest(st, cc); err != nil {
			return 0, err
		}
		resp.Volume, resp.Claim = v, c
		resp.AttachmentState, resp.PublishContext = a.GetState(), a.GetPublishContext()
		return max(c.GetModifyIndex(), v.GetModifyIndex(), a.GetModifyIndex()), nil
	})
	switch {
	case err != nil:
		return nil, err
	case unknown != nil:
		return nil, unknown
	}
	resp.Meta = meta
	return resp, nil
}

// ClientClaimUpdate records a client's report on a claim of its node as a
// ClaimUpdate: in-use (published), node-detached (unpublished), or a
// failed try of the claim's current step (state = the current state, with
// error). The state machine checks the move (forward only, node-detached
// only from releasing unless fenced) and the node again. A node-detached
// report of a claim already freed is done, and a report of the state the
// claim is in already is answered without a raft write.
func (e *claimsEndpoint) ClientClaimUpdate(ctx context.Context, req *pb.ClientClaimUpdateRequest) (*pb.ClientClaimUpdateResponse, error) {
	st := e.s.State().Snapshot()
	target := req.GetState()
	cc, err := clientClaimOf(nil, st, req.GetNodeId(), req.GetAllocId(), req.GetVolumeId(), req.GetClaimId(), true)
	if errcode.Code(err) == codes.NotFound {
		// The node may know the claim from a follower that applied its
		// plan before this leader did (raft commits an entry, then each
		// server applies it on its own): answering NotFound now would
		// make the node drop its report for good — an in-use claim left
		// ready, a detached one releasing. Read again once every
		// committed command is applied here.
		if berr := e.s.Barrier(ctx); berr != nil {
			return nil, fmt.Errorf("node %s's report on volume %q: %w", req.GetNodeId(), req.GetVolumeId(), berr)
		}
		st = e.s.State().Snapshot()
		cc, err = clientClaimOf(nil, st, req.GetNodeId(), req.GetAllocId(), req.GetVolumeId(), req.GetClaimId(), true)
	}
	if err != nil {
		if errcode.Code(err) == codes.NotFound && target == pb.ClaimState_CLAIM_STATE_NODE_DETACHED && req.GetError() == nil {
			// Freed already: the report was applied before, or the node
			// was forced off the claim. Nothing left to do.
			idx, ierr := st.Index(fsm.TableClaims)
			if ierr != nil {
				return nil, ierr
			}
			return &pb.ClientClaimUpdateResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
		}
		return nil, err
	}
	c := cc.claim
	t := &pb.ClaimTransition{ClaimId: c.GetId(), State: target, NodeId: req.GetNodeId(), Error: req.GetError(),
		Attempts: req.GetAttempts(), NextRetryAt: req.GetNextRetryAt()}
	who := fmt.Sprintf("%s on volume %q, node %s", rules.Claimant(c), c.GetVolumeId(), c.GetNodeId())
	switch {
	case req.GetError() != nil:
		if target != c.GetState() {
			return nil, fmt.Errorf("%w: %s is %s: a failed try is reported with the claim's current state, not %s", ErrInvalidClaimRequest,
				who, pb.EnumWord(c.GetState()), pb.EnumWord(target))
		}
		if t.Attempts == 0 {
			t.Attempts = c.GetAttempts() + 1
		}
	case target == pb.ClaimState_CLAIM_STATE_IN_USE, target == pb.ClaimState_CLAIM_STATE_NODE_DETACHED:
	default:
		return nil, fmt.Errorf("%w: %s: a client reports in-use or node-detached (or a failed try with error), not %s", ErrInvalidClaimRequest,
			who, pb.EnumWord(target))
	}
	if req.GetError() == nil && target == c.GetState() {
		// Already so (a restarted client reports in-use again for every
		// volume it holds published, and a report may be retried after
		// its answer was lost): the state machine would change nothing,
		// so nothing is proposed. This server is the leader (the route
		// says so), and what it has applied is committed; a claim that
		// moved on since in a write it has not applied yet would refuse
		// the report, which the client drops as it drops this answer.
		return &pb.ClientClaimUpdateResponse{Claim: c, Meta: &pb.WriteMeta{Index: c.GetModifyIndex()}}, nil
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	if req.GetNodeExpandedBytes() > 0 {
		v, err := st.VolumeByID(nil, c.GetVolumeId())
		if err != nil {
			return nil, err
		}
		t.NodeExpandedBytes = nodeExpandedBytes(e.s, req, v)
	}
	idx, err := e.s.Apply(ctx, fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{t}, UpdatedAt: e.s.Clock.Now().UnixNano()})
	if err != nil {
		return nil, fmt.Errorf("recording node %s's report on %s: %w", req.GetNodeId(), who, err)
	}
	after, err := e.s.State().ClaimByID(nil, c.GetId())
	if err != nil {
		return nil, err
	}
	return &pb.ClientClaimUpdateResponse{Claim: after, Meta: &pb.WriteMeta{Index: idx}}, nil
}

// tablesIndex is the index of the last change to any of the tables.
func tablesIndex(st *fsm.StateSnapshot, tables ...string) (uint64, error) {
	var out uint64
	for _, t := range tables {
		i, err := st.Index(t)
		if err != nil {
			return 0, err
		}
		out = max(out, i)
	}
	return out, nil
}
