package endpoints

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/volumespec"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// hostVolumesSince is the first berth version whose servers know the
// host_volumes table and its commands (HostVolumeRegister,
// HostVolumeDelete), and free host volume claims as their allocs stop.
var hostVolumesSince = versions.MustConstraint(">= " + HostVolumesSinceVersion)

// HostVolumesSinceVersion is the version hostVolumesSince names.
const HostVolumesSinceVersion = "0.1.0-dev.4"

// HostVolumeNodeCaller runs a dynamic host volume's plugin on its node
// (clientproxy.CSIForwarder).
type HostVolumeNodeCaller interface {
	HostVolumeOnNode(ctx context.Context, create bool, nodeID string, v *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error)
}

var (
	// ErrNoNodeForHostVolume is returned by a host volume create when no
	// node can take it: the named node is not ready, or no ready node
	// satisfies the constraints and lacks a volume of the name.
	ErrNoNodeForHostVolume = errcode.New(codes.FailedPrecondition, "no node can take the host volume")
	// ErrNoHostVolumeCalls is returned by host volume create and delete on
	// a server built without node calls.
	ErrNoHostVolumeCalls = errcode.New(codes.Unimplemented, "this server makes no host volume node calls")
)

type hostVolumesEndpoint struct {
	pb.UnimplementedHostVolumesServer
	s     *api
	calls HostVolumeNodeCaller
}

func (e *hostVolumesEndpoint) ready() error {
	if e.calls == nil {
		return ErrNoHostVolumeCalls
	}
	return e.s.RequireServersAt(hostVolumesSince, HostVolumesSinceVersion, "dynamic host volumes")
}

// Create picks the volume's node, has its plugin make it there and
// records it. A volume given with the ID of one recorded is made again on
// its node (plugins are idempotent) and its record updated.
func (e *hostVolumesEndpoint) Create(ctx context.Context, req *pb.HostVolumeCreateRequest) (*pb.HostVolumeCreateResponse, error) {
	v := proto.CloneOf(req.GetVolume())
	if v == nil {
		return nil, fmt.Errorf("host volume create: %w: no volume", volumespec.ErrInvalidVolume)
	}
	volumespec.CanonicalizeHost(v)
	if err := volumespec.ValidateHost(v); err != nil {
		return nil, err
	}
	if err := e.ready(); err != nil {
		return nil, err
	}
	snap := e.s.State().Snapshot()
	if v.GetId() != "" {
		old, err := snap.HostVolumeByID(nil, v.GetId())
		if err != nil {
			return nil, err
		}
		if old == nil {
			return nil, fmt.Errorf("host volume %q: %w: no volume has ID %s (leave id out to create one)", v.GetName(), fsm.ErrVolumeNotFound, v.GetId())
		}
		if v.GetNodeId() != "" && v.GetNodeId() != old.GetNodeId() {
			return nil, fmt.Errorf("host volume %q (%s): %w: it is on node %s, not %s (a host volume does not move)",
				v.GetName(), v.GetId(), volumespec.ErrInvalidVolume, old.GetNodeId(), v.GetNodeId())
		}
		v.NodeId = old.GetNodeId()
		v.CreatedAt = old.GetCreatedAt()
	} else {
		v.Id = uuid.Generate()
		node, err := pickHostVolumeNode(snap, v)
		if err != nil {
			return nil, err
		}
		v.NodeId = node
		v.CreatedAt = e.s.Clock.Now().UnixNano()
	}
	resp, err := e.calls.HostVolumeOnNode(ctx, true, v.GetNodeId(), v)
	if err != nil {
		return nil, err
	}
	v.HostPath, v.CapacityBytes = resp.GetHostPath(), resp.GetCapacityBytes()
	v.State = pb.HostVolumeState_HOST_VOLUME_STATE_READY
	v.ModifiedAt = e.s.Clock.Now().UnixNano()
	index, err := e.s.Apply(ctx, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: v})
	if err != nil {
		// Another create took the name on the node meanwhile: the node
		// refuses a second name before this answer, so this is rare;
		// undo what the plugin made rather than leave it unknown.
		if errors.Is(err, fsm.ErrHostVolumeNameTaken) {
			if _, derr := e.calls.HostVolumeOnNode(ctx, false, v.GetNodeId(), v); derr != nil {
				e.s.Logger.Warn("host volume create: removing the volume made for a refused record", "volume_id", v.GetId(), "node_id", v.GetNodeId(), "error", derr)
			}
		}
		return nil, fmt.Errorf("recording host volume %q (%s) on node %s: %w", v.GetName(), v.GetId(), v.GetNodeId(), err)
	}
	stored, err := e.s.State().HostVolumeByID(nil, v.GetId())
	if err != nil {
		return nil, err
	}
	return &pb.HostVolumeCreateResponse{Volume: stored, Index: index}, nil
}

// pickHostVolumeNode returns v's node: node_id when given (it must be
// ready and run a client), else the ready, eligible node satisfying v's
// constraints with the fewest dynamic host volumes that has no host
// volume of v's name, the lowest ID among equals.
func pickHostVolumeNode(snap *fsm.StateSnapshot, v *pb.HostVolume) (string, error) {
	nodes, err := snap.Nodes(nil)
	if err != nil {
		return "", err
	}
	why := map[string]int{}
	best, bestCount := "", -1
	for _, n := range nodes {
		if v.GetNodeId() != "" && n.GetId() != v.GetNodeId() {
			continue
		}
		reason := ""
		switch {
		case n.GetStatus() != pb.NodeStatus_NODE_STATUS_READY || n.GetFenced():
			reason = "node not ready"
		case v.GetNodeId() == "" && !rules.NodeSchedulable(n):
			reason = "node not eligible"
		case n.GetHostVolumes()[v.GetName()] != nil:
			reason = fmt.Sprintf("the node has a host volume %q", v.GetName())
		}
		if reason == "" {
			if ok, c := scheduler.NodeSatisfies(n, v.GetConstraints()); !ok {
				reason = c
			}
		}
		if reason == "" {
			vols, err := snap.HostVolumesByNode(nil, n.GetId())
			if err != nil {
				return "", err
			}
			if !slices.ContainsFunc(vols, func(o *pb.HostVolume) bool { return o.GetName() == v.GetName() }) {
				if bestCount < 0 || len(vols) < bestCount {
					best, bestCount = n.GetId(), len(vols)
				}
				continue
			}
			reason = fmt.Sprintf("the node has a host volume %q", v.GetName())
		}
		why[reason]++
	}
	if best != "" {
		return best, nil
	}
	if v.GetNodeId() != "" {
		if len(why) == 0 {
			return "", fmt.Errorf("host volume %q: %w: node %s is not registered", v.GetName(), ErrNoNodeForHostVolume, v.GetNodeId())
		}
		for r := range why {
			return "", fmt.Errorf("host volume %q: %w: node %s: %s", v.GetName(), ErrNoNodeForHostVolume, v.GetNodeId(), r)
		}
	}
	reasons := make([]string, 0, len(why))
	for _, r := range slices.Sorted(mapsKeys(why)) {
		reasons = append(reasons, fmt.Sprintf("%s (%d)", r, why[r]))
	}
	return "", fmt.Errorf("host volume %q: %w: of %d nodes: %v", v.GetName(), ErrNoNodeForHostVolume, len(nodes), reasons)
}

// Delete has the volume's node remove it and forgets it. It is first
// marked deleting, in the apply that checks no claim holds it
// (ErrVolumeInUse otherwise), so no claim is granted during the plugin's
// delete; a failed delete puts it back to ready.
func (e *hostVolumesEndpoint) Delete(ctx context.Context, req *pb.HostVolumeDeleteRequest) (*pb.HostVolumeDeleteResponse, error) {
	if err := e.ready(); err != nil {
		return nil, err
	}
	v, err := e.s.State().HostVolumeByID(nil, req.GetId())
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("host volume %s: %w", req.GetId(), fsm.ErrVolumeNotFound)
	}
	marked := proto.CloneOf(v)
	marked.State = pb.HostVolumeState_HOST_VOLUME_STATE_DELETING
	marked.ModifiedAt = e.s.Clock.Now().UnixNano()
	if _, err := e.s.Apply(ctx, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: marked}); err != nil {
		return nil, fmt.Errorf("deleting host volume %q (%s) on node %s: %w", v.GetName(), v.GetId(), v.GetNodeId(), err)
	}
	if _, err := e.calls.HostVolumeOnNode(ctx, false, v.GetNodeId(), v); err != nil {
		back := proto.CloneOf(v)
		back.State = pb.HostVolumeState_HOST_VOLUME_STATE_READY
		back.ModifiedAt = e.s.Clock.Now().UnixNano()
		if _, rerr := e.s.Apply(context.WithoutCancel(ctx), fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: back}); rerr != nil {
			e.s.Logger.Warn("host volume delete: putting the volume back to ready", "volume_id", v.GetId(), "error", rerr)
		}
		return nil, err
	}
	index, err := e.s.Apply(ctx, fsm.HostVolumeDelete, &pb.HostVolumeDeleteCommand{Id: v.GetId()})
	if err != nil {
		return nil, fmt.Errorf("forgetting host volume %q (%s): %w", v.GetName(), v.GetId(), err)
	}
	return &pb.HostVolumeDeleteResponse{Index: index}, nil
}

// Get answers one dynamic host volume (a blocking query).
func (e *hostVolumesEndpoint) Get(ctx context.Context, req *pb.HostVolumeGetRequest) (*pb.HostVolumeGetResponse, error) {
	resp := &pb.HostVolumeGetResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		var err error
		if resp.Volume, err = st.HostVolumeByID(ws, req.GetId()); err != nil {
			return 0, err
		}
		return st.Index(fsm.TableHostVolumes)
	})
	if err != nil {
		return nil, err
	}
	if resp.Volume == nil {
		return nil, fmt.Errorf("host volume %s: %w", req.GetId(), fsm.ErrVolumeNotFound)
	}
	resp.Meta = meta
	return resp, nil
}

// List pages the dynamic host volumes by ID, node_id keeping a node's.
func (e *hostVolumesEndpoint) List(ctx context.Context, req *pb.HostVolumeListRequest) (*pb.HostVolumeListResponse, error) {
	n, err := PerPage(req.GetQuery())
	if err != nil {
		return nil, err
	}
	resp := &pb.HostVolumeListResponse{}
	var next string
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		vols, nextID, err := st.HostVolumesPage(ws, req.GetQuery().GetNextToken(), n, func(v *pb.HostVolume) bool {
			return req.GetNodeId() == "" || v.GetNodeId() == req.GetNodeId()
		})
		if err != nil {
			return 0, err
		}
		resp.Volumes, next = vols, nextID
		return st.Index(fsm.TableHostVolumes)
	})
	if err != nil {
		return nil, err
	}
	meta.NextToken = next
	resp.Meta = meta
	return resp, nil
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
