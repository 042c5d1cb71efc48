package endpoints

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
	// ErrHostVolumeNodeUp is returned by a forced host volume delete whose
	// node is ready: its plugin is asked instead.
	ErrHostVolumeNodeUp = errcode.New(codes.FailedPrecondition, "the host volume's node is up")
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

// Create picks the volume's node, records the volume pending (its ID,
// node and name: the name is taken in raft before the node makes
// anything, so no node call is ever undone), has its plugin make it
// there, and records it ready. A node answer that failed for certain
// forgets the pending record; an uncertain one (timeout, cancel,
// Unavailable) keeps it: create again with its ID (the node's create is
// idempotent) or delete it. A volume given with the ID of one recorded
// is made again on its node and its record updated; its name cannot
// change, and one being deleted is refused.
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
	fresh := v.GetId() == ""
	if !fresh {
		old, err := snap.HostVolumeByID(nil, v.GetId())
		if err != nil {
			return nil, err
		}
		switch {
		case old == nil:
			return nil, fmt.Errorf("host volume %q: %w: no volume has ID %s (leave id out to create one)", v.GetName(), fsm.ErrVolumeNotFound, v.GetId())
		case v.GetNodeId() != "" && v.GetNodeId() != old.GetNodeId():
			return nil, fmt.Errorf("host volume %q (%s): %w: it is on node %s, not %s (a host volume does not move)",
				v.GetName(), v.GetId(), volumespec.ErrInvalidVolume, old.GetNodeId(), v.GetNodeId())
		case v.GetName() != old.GetName():
			return nil, fmt.Errorf("host volume %q (%s): %w: it is named %q (a host volume's name does not change)",
				v.GetName(), v.GetId(), volumespec.ErrInvalidVolume, old.GetName())
		case old.GetState() == pb.HostVolumeState_HOST_VOLUME_STATE_DELETING:
			return nil, fmt.Errorf("host volume %q (%s) on node %s: %w: delete it again to finish, then create it anew",
				v.GetName(), v.GetId(), old.GetNodeId(), fsm.ErrVolumeDeleting)
		}
		v.NodeId = old.GetNodeId()
		v.CreatedAt = old.GetCreatedAt()
		v.State = old.GetState()
	} else {
		v.Id = uuid.Generate()
		node, err := pickHostVolumeNode(snap, v)
		if err != nil {
			return nil, err
		}
		v.NodeId = node
		v.CreatedAt = e.s.Clock.Now().UnixNano()
		v.State = pb.HostVolumeState_HOST_VOLUME_STATE_PENDING
		v.ModifiedAt = v.GetCreatedAt()
		if _, err := e.s.Apply(ctx, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: v}); err != nil {
			return nil, fmt.Errorf("recording host volume %q (%s) on node %s pending: %w", v.GetName(), v.GetId(), v.GetNodeId(), err)
		}
	}
	resp, err := e.calls.HostVolumeOnNode(ctx, true, v.GetNodeId(), v)
	if err != nil {
		err = fmt.Errorf("creating host volume %q (%s) on node %s: %w", v.GetName(), v.GetId(), v.GetNodeId(), err)
		if v.GetState() == pb.HostVolumeState_HOST_VOLUME_STATE_PENDING && (!fresh || hostCallUncertain(err)) {
			return nil, fmt.Errorf("%w; the node may have made it: it stays recorded pending (takes no claim): create again with id %s, or delete it", err, v.GetId())
		}
		if !fresh {
			return nil, err
		}
		// The node refused this call's create for certain: nothing was
		// made.
		forget, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, ferr := e.s.Apply(forget, fsm.HostVolumeDelete, &pb.HostVolumeDeleteCommand{Id: v.GetId()}); ferr != nil {
			return nil, fmt.Errorf("%w; forgetting its pending record failed too (%v): delete %s", err, ferr, v.GetId())
		}
		return nil, err
	}
	v.HostPath, v.CapacityBytes = resp.GetHostPath(), resp.GetCapacityBytes()
	v.State = pb.HostVolumeState_HOST_VOLUME_STATE_READY
	v.ModifiedAt = e.s.Clock.Now().UnixNano()
	index, err := e.s.Apply(ctx, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: v, MustExist: true})
	if err != nil {
		return nil, fmt.Errorf("recording host volume %q (%s) on node %s as made: %w (create again with id %s)", v.GetName(), v.GetId(), v.GetNodeId(), err, v.GetId())
	}
	stored, err := e.s.State().HostVolumeByID(nil, v.GetId())
	if err != nil {
		return nil, err
	}
	return &pb.HostVolumeCreateResponse{Volume: stored, Index: index}, nil
}

// hostCallUncertain reports whether a node call's failure leaves its
// outcome unknown (the node may have acted): a timeout, a cancel, the node
// unreachable (errcode.Uncertain's codes).
func hostCallUncertain(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errcode.Uncertain.Has(errcode.Code(err))
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

// Delete has the volume's node remove it and forgets it (a pending one
// too: its node may have made it). It is first marked deleting, in the
// apply that checks no claim holds it (ErrVolumeInUse otherwise), so no
// claim is granted during the plugin's delete. A delete the node refused
// for certain puts it back to the state it had; an uncertain one (the
// node may have removed it) keeps it deleting: delete again. force (the
// node gone, down or fenced) forgets it without a node call, warning that
// its data may remain.
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
	if req.GetForce() {
		return e.forceDelete(ctx, v)
	}
	marked := proto.CloneOf(v)
	marked.State = pb.HostVolumeState_HOST_VOLUME_STATE_DELETING
	marked.ModifiedAt = e.s.Clock.Now().UnixNano()
	mark := &pb.HostVolumeRegisterCommand{Volume: marked}
	if v.GetState() == pb.HostVolumeState_HOST_VOLUME_STATE_DELETING {
		// Delete again: take over the mark read (another delete's put_back
		// of it is then refused); refused if another delete re-marked it.
		mark.MarkIndex = v.GetModifyIndex()
	}
	markIndex, err := e.s.Apply(ctx, fsm.HostVolumeRegister, mark)
	if err != nil {
		return nil, fmt.Errorf("deleting host volume %q (%s) on node %s: %w", v.GetName(), v.GetId(), v.GetNodeId(), err)
	}
	if _, err := e.calls.HostVolumeOnNode(ctx, false, v.GetNodeId(), v); err != nil {
		err = fmt.Errorf("deleting host volume %q (%s) on node %s: %w", v.GetName(), v.GetId(), v.GetNodeId(), err)
		if hostCallUncertain(err) || v.GetState() == pb.HostVolumeState_HOST_VOLUME_STATE_DELETING {
			return nil, fmt.Errorf("%w; the node may have removed it, so it stays marked deleting and takes no claim: run delete again (-force if its node is gone)", err)
		}
		back := proto.CloneOf(v)
		back.ModifiedAt = e.s.Clock.Now().UnixNano()
		put, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, rerr := e.s.Apply(put, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: back, PutBack: true, MarkIndex: markIndex}); rerr != nil {
			if errors.Is(rerr, fsm.ErrHostVolumeMarkChanged) {
				return nil, fmt.Errorf("%w; not put back to %s: %w", err, pb.EnumWord(v.GetState()), rerr)
			}
			return nil, fmt.Errorf("%w; putting it back to %s failed too (%v): it takes no claim until a delete completes", err, pb.EnumWord(v.GetState()), rerr)
		}
		return nil, err
	}
	index, err := e.s.Apply(ctx, fsm.HostVolumeDelete, &pb.HostVolumeDeleteCommand{Id: v.GetId()})
	if err != nil {
		return nil, fmt.Errorf("forgetting host volume %q (%s): %w", v.GetName(), v.GetId(), err)
	}
	return &pb.HostVolumeDeleteResponse{Index: index}, nil
}

// forceDelete forgets v without a node call; only when its node is gone,
// down or fenced (a ready node is asked: delete without -force).
func (e *hostVolumesEndpoint) forceDelete(ctx context.Context, v *pb.HostVolume) (*pb.HostVolumeDeleteResponse, error) {
	n, err := e.s.State().NodeByID(nil, v.GetNodeId())
	if err != nil {
		return nil, err
	}
	if n != nil && n.GetStatus() == pb.NodeStatus_NODE_STATUS_READY && !n.GetFenced() {
		return nil, fmt.Errorf("host volume %q (%s): %w: its node %s is ready; delete it without -force, so its plugin removes it",
			v.GetName(), v.GetId(), ErrHostVolumeNodeUp, v.GetNodeId())
	}
	index, err := e.s.Apply(ctx, fsm.HostVolumeDelete, &pb.HostVolumeDeleteCommand{Id: v.GetId()})
	if err != nil {
		return nil, fmt.Errorf("forgetting host volume %q (%s): %w", v.GetName(), v.GetId(), err)
	}
	return &pb.HostVolumeDeleteResponse{Index: index, Warning: fmt.Sprintf(
		"host volume %q (%s) forgotten without asking node %s: its data may remain there (%s); if the node comes back it stops advertising the volume (and keeps its data) when it registers", v.GetName(), v.GetId(), v.GetNodeId(),
		hostVolumePathOrUnknown(v))}, nil
}

func hostVolumePathOrUnknown(v *pb.HostVolume) string {
	if v.GetHostPath() == "" {
		return "path unknown"
	}
	return v.GetHostPath()
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
