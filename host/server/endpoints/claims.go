package endpoints

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"berth.dev/berth/internal/rules"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

var (
	// ErrClaimNodeUnfit is returned by Claims.Claim when the node named
	// cannot take the volume: it is ineligible or draining, has no healthy
	// node instance of the volume's plugin, is outside the volume's
	// topology, or holds the plugin's max volumes. The message says which.
	ErrClaimNodeUnfit = errcode.New(codes.FailedPrecondition, "the node cannot take a claim of the volume")
	// ErrNoClaimNode is returned by Claims.Claim when no node was named and
	// none can take the claim; the message gives each node's reason.
	ErrNoClaimNode = errcode.New(codes.FailedPrecondition, "no node can take a claim of the volume")
	// ErrVolumeNotClaimable is returned by Claims.Claim when the volume can
	// be claimed nowhere for now: its plugin is not schedulable (no healthy
	// node instance), or requires a controller publish and has no healthy
	// controller. The claim would wait, reserved, for as long as that
	// lasts; the message names the volume and the plugin.
	ErrVolumeNotClaimable = errcode.New(codes.FailedPrecondition, "the volume cannot be claimed now")
	// ErrInvalidClaimRequest is returned for a claim request that names too
	// little or contradicts itself (no volume, an unknown mode, a claim of
	// another volume).
	ErrInvalidClaimRequest = errcode.New(codes.InvalidArgument, "invalid claim request")
)

// claimsEndpoint is the Claims service (claims_rpc.proto): the operator's
// claims here, the client's in claims_client.go.
type claimsEndpoint struct {
	pb.UnimplementedClaimsServer
	s *api
}

func (e *claimsEndpoint) requireVersion() error {
	return e.s.RequireServersAt(volumesSince, VolumesSinceVersion, "CSI volume claims")
}

// PublishPath is where a node's client publishes a claim's volume,
// relative to the client's data_dir (DESIGN "Client data directory":
// csi/publish/<alloc>/<volume>, an operator's claim ID standing in for the
// alloc).
func PublishPath(c *pb.Claim) string {
	owner := c.GetAllocId()
	if owner == "" {
		owner = c.GetId()
	}
	return path.Join("csi", "publish", owner, c.GetVolumeId())
}

// Claim reserves an operator's claim: it picks the capability (the one the
// volume's claims already use, else a file system one allowing the mode),
// checks or chooses the node, checks the claim fits (the state machine
// checks again when it applies) and proposes OperatorClaim.
func (e *claimsEndpoint) Claim(ctx context.Context, req *pb.ClaimCreateRequest) (*pb.ClaimCreateResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, fmt.Errorf("volume claim: %w: volume_id is required", ErrInvalidClaimRequest)
	}
	mode := req.GetMode()
	switch mode {
	case pb.ClaimMode_CLAIM_MODE_UNSPECIFIED:
		mode = pb.ClaimMode_CLAIM_MODE_WRITE
	case pb.ClaimMode_CLAIM_MODE_READ, pb.ClaimMode_CLAIM_MODE_WRITE:
	default:
		return nil, fmt.Errorf("volume %q: %w: mode %d; want read or write", req.GetVolumeId(), ErrInvalidClaimRequest, mode)
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	st := e.s.State().Snapshot()
	v, err := st.VolumeByID(nil, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("volume %q: %w", req.GetVolumeId(), fsm.ErrVolumeNotFound)
	}
	if err := checkClaimable(st, v); err != nil {
		return nil, err
	}
	held, err := st.ClaimsByVolume(nil, v.GetId())
	if err != nil {
		return nil, err
	}
	c := &pb.Claim{Id: uuid.Generate(), VolumeId: v.GetId(), Operator: true, NodeId: req.GetNodeId(), Mode: mode}
	capability, err := claimCapability(v, held, mode)
	if err != nil {
		return nil, err
	}
	c.AccessMode, c.AttachmentMode = capability.GetAccessMode(), capability.GetAttachmentMode()
	if c.NodeId == "" {
		if c.NodeId, err = chooseClaimNode(st, v, held, c); err != nil {
			return nil, err
		}
	} else if err := checkClaimNode(st, v, held, c); err != nil {
		return nil, err
	}
	idx, err := e.s.Apply(ctx, fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: c, CreatedAt: e.s.Clock.Now().UnixNano()})
	if err != nil {
		return nil, fmt.Errorf("claiming volume %q on node %s: %w", v.GetId(), c.GetNodeId(), err)
	}
	st = e.s.State().Snapshot()
	stored, err := st.ClaimByID(nil, c.GetId())
	if err != nil {
		return nil, err
	}
	if stored == nil {
		// Released and freed between the apply and this read: say what was
		// reserved.
		stored = c
	}
	att, err := st.Attachment(nil, v.GetId(), c.GetNodeId())
	if err != nil {
		return nil, err
	}
	return &pb.ClaimCreateResponse{Claim: stored, Attachment: att, PublishPath: PublishPath(stored), Meta: &pb.WriteMeta{Index: idx}}, nil
}

// checkClaimable refuses (ErrVolumeNotClaimable) a claim of v that could
// only wait: the state machine would reserve it, but with no healthy
// controller its controller publish never runs, and an unschedulable
// plugin has no node instance to stage it. Refusing says why now, where a
// reserved claim would leave the operator waiting on nothing. A controller
// is required when the plugin's row says so or the volume's mirror does
// (the row is recomputed as controllers come and go; either saying so is
// enough to need one).
func checkClaimable(st *fsm.StateSnapshot, v *pb.Volume) error {
	p, err := st.CSIPluginFacts(nil, v.GetPluginId())
	if err != nil {
		return err
	}
	switch {
	case p == nil:
		return fmt.Errorf("volume %q: %w: no node runs its csi plugin %q", v.GetId(), ErrVolumeNotClaimable, v.GetPluginId())
	case (p.GetControllerRequired() || v.GetControllerRequired()) && p.GetControllersHealthy() == 0:
		return fmt.Errorf("volume %q: %w: csi plugin %q requires a controller publish and none of its controllers is healthy "+
			"(0 of %d); the claim would wait for one", v.GetId(), ErrVolumeNotClaimable, v.GetPluginId(), p.GetControllersExpected())
	case !v.GetSchedulable() || !p.GetSchedulable():
		return fmt.Errorf("volume %q: %w: csi plugin %q is not schedulable (%d of %d node instances healthy)",
			v.GetId(), ErrVolumeNotClaimable, v.GetPluginId(), p.GetNodesHealthy(), p.GetNodesExpected())
	}
	return nil
}

// claimCapability picks the volume capability an operator's claim uses:
// among those allowing the mode, the access mode the volume's claims hold
// it in (every claim shares it), else a file system one (the claim is
// published as a directory), else the first. None allowing the mode is
// fsm.ErrClaimCapability, naming what the volume offers.
func claimCapability(v *pb.Volume, held []*pb.Claim, mode pb.ClaimMode) (*pb.VolumeCapability, error) {
	var fits []*pb.VolumeCapability
	var offers []string
	for _, c := range v.GetCapabilities() {
		offers = append(offers, pb.EnumWord(c.GetAccessMode()))
		limits, ok := rules.AccessModeLimitsOf(c.GetAccessMode())
		if ok && (mode != pb.ClaimMode_CLAIM_MODE_WRITE || limits.Write) {
			fits = append(fits, c)
		}
	}
	if len(fits) == 0 {
		return nil, fmt.Errorf("volume %q: %w: no capability allows a %s claim (it offers %s)", v.GetId(), fsm.ErrClaimCapability,
			pb.EnumWord(mode), strings.Join(offers, ", "))
	}
	fs := pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM
	var best *pb.VolumeCapability
	score := func(c *pb.VolumeCapability) int {
		n := 0
		if len(held) > 0 && c.GetAccessMode() == held[0].GetAccessMode() {
			n += 2
			if c.GetAttachmentMode() == held[0].GetAttachmentMode() {
				n++
			}
		}
		if c.GetAttachmentMode() == fs {
			n++
		}
		return n
	}
	for _, c := range fits {
		if best == nil || score(c) > score(best) {
			best = c
		}
	}
	return best, nil
}

// checkClaimNode says why node c.NodeId cannot take claim c on v, or nil:
// the state machine's refusals (unknown, down or fenced, no free claim)
// with its sentinels, and what only the servers check (eligibility, the
// node plugin, topology, max volumes) as ErrClaimNodeUnfit.
func checkClaimNode(st *fsm.StateSnapshot, v *pb.Volume, held []*pb.Claim, c *pb.Claim) error {
	n, err := st.NodeByID(nil, c.GetNodeId())
	if err != nil {
		return err
	}
	if n == nil {
		return fmt.Errorf("volume %q: node %s: %w", v.GetId(), c.GetNodeId(), fsm.ErrNodeNotFound)
	}
	why, err := claimNodeUnfit(st, v, n)
	if err != nil {
		return err
	}
	switch {
	case n.GetFenced() || n.GetStatus() != pb.NodeStatus_NODE_STATUS_READY:
		return fmt.Errorf("volume %q: %s: %w", v.GetId(), why, fsm.ErrNodeUnavailable)
	case why != "":
		return fmt.Errorf("volume %q: %w: %s", v.GetId(), ErrClaimNodeUnfit, why)
	}
	return rules.CheckClaim(v, held, c)
}

// claimNodeUnfit says why node n cannot take a claim of v ("" when it
// can, free claims aside).
func claimNodeUnfit(st *fsm.StateSnapshot, v *pb.Volume, n *pb.Node) (string, error) {
	who := fmt.Sprintf("node %s (%s)", n.GetId(), n.GetName())
	switch {
	case n.GetFenced():
		return who + " is fenced", nil
	case n.GetStatus() != pb.NodeStatus_NODE_STATUS_READY:
		return fmt.Sprintf("%s is %s", who, pb.EnumWord(n.GetStatus())), nil
	case n.GetDrain() != nil:
		return who + " is draining", nil
	case n.GetEligibility() == pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE:
		return who + " is ineligible", nil
	}
	info := n.GetCsiNodePlugins()[v.GetPluginId()]
	switch {
	case info == nil:
		return fmt.Sprintf("%s runs no node instance of csi plugin %q", who, v.GetPluginId()), nil
	case !info.GetHealthy():
		return fmt.Sprintf("%s: its node instance of csi plugin %q is unhealthy (%s)", who, v.GetPluginId(), info.GetHealthDescription()), nil
	case !scheduler.TopologyReaches(v, info):
		return fmt.Sprintf("%s is outside volume %q's topology (the node is at %v)", who, v.GetId(), info.GetNodeInfo().GetAccessibleTopology()), nil
	}
	// The state machine refuses a claim beside a detaching attachment; so
	// does the node choice, which then takes another node.
	if a, err := st.Attachment(nil, v.GetId(), n.GetId()); err != nil {
		return "", err
	} else if a.GetState() == pb.AttachmentState_ATTACHMENT_STATE_DETACHING {
		return fmt.Sprintf("%s: volume %q is detaching from it (controller unpublish under way); claim it there once that is done", who, v.GetId()), nil
	}
	if max := info.GetNodeInfo().GetMaxVolumes(); max > 0 {
		on, err := pluginVolumesOn(st, n.GetId(), v)
		if err != nil {
			return "", err
		}
		if int64(len(on)) >= max {
			return fmt.Sprintf("%s holds %d volumes of csi plugin %q, its max", who, len(on), v.GetPluginId()), nil
		}
	}
	return "", nil
}

// pluginVolumesOn lists the volumes of v's plugin, v excepted, that have a
// claim on the node: what counts against the node plugin's max volumes.
func pluginVolumesOn(st *fsm.StateSnapshot, nodeID string, v *pb.Volume) ([]string, error) {
	claims, err := st.ClaimsByNode(nil, nodeID)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range claims {
		id := c.GetVolumeId()
		if id == v.GetId() || slices.Contains(out, id) {
			continue
		}
		other, err := st.VolumeByID(nil, id)
		if err != nil {
			return nil, err
		}
		if other.GetPluginId() == v.GetPluginId() {
			out = append(out, id)
		}
	}
	return out, nil
}

// chooseClaimNode picks the node for an operator's claim among the nodes
// that report the volume's node plugin: one that can take it, preferring a
// node the volume is attached to already (no new controller publish),
// then one that holds claims of it, then the lowest ID, so the choice is
// repeatable. None: ErrNoClaimNode with each node's reason.
func chooseClaimNode(st *fsm.StateSnapshot, v *pb.Volume, held []*pb.Claim, c *pb.Claim) (string, error) {
	p, err := st.CSIPluginByID(nil, v.GetPluginId())
	if err != nil {
		return "", err
	}
	ids := slices.Sorted(maps.Keys(p.GetNodes()))
	if len(ids) == 0 {
		return "", fmt.Errorf("volume %q: %w: no node runs a node instance of csi plugin %q", v.GetId(), ErrNoClaimNode, v.GetPluginId())
	}
	best, bestScore := "", -1
	var why []string
	for _, id := range ids {
		try := proto.CloneOf(c)
		try.NodeId = id
		err := checkClaimNode(st, v, held, try)
		if err != nil {
			if errcode.Code(err) == codes.Unknown {
				return "", err
			}
			why = append(why, strings.TrimPrefix(err.Error(), fmt.Sprintf("volume %q: ", v.GetId())))
			continue
		}
		score := 0
		if a, err := st.Attachment(nil, v.GetId(), id); err != nil {
			return "", err
		} else if a.GetState() == pb.AttachmentState_ATTACHMENT_STATE_ATTACHED {
			score = 2
		}
		if score == 0 && slices.ContainsFunc(held, func(h *pb.Claim) bool { return h.GetNodeId() == id }) {
			score = 1
		}
		if score > bestScore {
			best, bestScore = id, score
		}
	}
	if best == "" {
		return "", fmt.Errorf("volume %q: %w: %s", v.GetId(), ErrNoClaimNode, strings.Join(why, "; "))
	}
	return best, nil
}

// Release moves an operator's claim to releasing (OperatorClaimRelease).
// An unknown claim is NotFound (never reserved, or freed already), an
// alloc's claim is refused: it is released when its alloc stops.
func (e *claimsEndpoint) Release(ctx context.Context, req *pb.ClaimReleaseRequest) (*pb.ClaimReleaseResponse, error) {
	id := req.GetClaimId()
	if id == "" {
		return nil, fmt.Errorf("volume release: %w: claim_id is required", ErrInvalidClaimRequest)
	}
	c, err := e.s.State().ClaimByID(nil, id)
	if err != nil {
		return nil, err
	}
	switch {
	case c == nil:
		return nil, fmt.Errorf("claim %q (never reserved, or freed already): %w", id, fsm.ErrClaimNotFound)
	case req.GetVolumeId() != "" && c.GetVolumeId() != req.GetVolumeId():
		return nil, fmt.Errorf("claim %q is a claim of volume %q, not of volume %q: %w", id, c.GetVolumeId(), req.GetVolumeId(), fsm.ErrClaimNotFound)
	case !c.GetOperator():
		return nil, fmt.Errorf("claim %q on volume %q belongs to alloc %q, released when it stops: %w", id, c.GetVolumeId(), c.GetAllocId(), fsm.ErrNotOperatorClaim)
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	idx, err := e.s.Apply(ctx, fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: id, UpdatedAt: e.s.Clock.Now().UnixNano()})
	if err != nil {
		return nil, fmt.Errorf("releasing claim %q on volume %q: %w", id, c.GetVolumeId(), err)
	}
	after, err := e.s.State().ClaimByID(nil, id)
	if err != nil {
		return nil, err
	}
	return &pb.ClaimReleaseResponse{Claim: after, Meta: &pb.WriteMeta{Index: idx}}, nil
}

// Get reads a claim and its volume's attachment to the claim's node; a
// blocking query wakes when either changes, and a claim freed while it
// waits is answered NotFound.
func (e *claimsEndpoint) Get(ctx context.Context, req *pb.ClaimGetRequest) (*pb.ClaimGetResponse, error) {
	id := req.GetClaimId()
	if id == "" {
		return nil, fmt.Errorf("claim get: %w: claim_id is required", ErrInvalidClaimRequest)
	}
	resp := &pb.ClaimGetResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		resp.Claim, resp.Attachment = nil, nil
		c, err := st.ClaimByID(ws, id)
		if err != nil {
			return 0, err
		}
		if c == nil {
			// Its removal moved the claims table's index: a waiting query
			// ends and answers NotFound.
			return st.Index(fsm.TableClaims)
		}
		a, err := st.Attachment(ws, c.GetVolumeId(), c.GetNodeId())
		if err != nil {
			return 0, err
		}
		resp.Claim, resp.Attachment, resp.PublishPath = c, a, PublishPath(c)
		return max(c.GetModifyIndex(), a.GetModifyIndex()), nil
	})
	if err != nil {
		return nil, err
	}
	if resp.Claim == nil {
		return nil, fmt.Errorf("claim %q (never reserved, or freed): %w", id, fsm.ErrClaimNotFound)
	}
	resp.Meta = meta
	return resp, nil
}
