package client

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/client/hostvolumes"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/volumehooks"
)

// hostVolumeInfos returns the node's host volumes for its registration
// and its tasks: the static ones of its config and the dynamic ones it
// made (mergeHostVolumes).
func (c *Client) hostVolumeInfos() map[string]*pb.HostVolumeInfo {
	var dynamic map[string]*pb.HostVolumeInfo
	if c.dynamicVolumes != nil {
		dynamic = c.dynamicVolumes.Volumes()
	}
	return mergeHostVolumes(c.cfg.HostVolumes, dynamic)
}

// mergeHostVolumes is the node's host volumes by name: a dynamic one wins
// over a static one of its name (Nomad's rule: the servers recorded the
// dynamic one, and claims name it; the agent's config gained the name
// after it was made — newDynamicVolumes warns of it). Nil when none.
func mergeHostVolumes(static, dynamic map[string]*pb.HostVolumeInfo) map[string]*pb.HostVolumeInfo {
	out := make(map[string]*pb.HostVolumeInfo, len(static)+len(dynamic))
	for name, hv := range static {
		out[name] = proto.CloneOf(hv)
	}
	for name, hv := range dynamic {
		out[name] = hv
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// newDynamicVolumes builds the dynamic host volume manager and makes
// again what it made before a restart (plugins are idempotent), in
// parallel and for a bounded time, before the first registration reports
// them: one not restored by then is not advertised, and is retried in the
// background (the node registers again once it is).
func (c *Client) newDynamicVolumes() error {
	dir := c.cfg.HostVolumesDir
	if dir == "" {
		dir = filepath.Join(c.cfg.DataDir, "host_volumes")
	}
	m, err := hostvolumes.New(hostvolumes.Config{
		StateFile:  filepath.Join(c.cfg.DataDir, "client", "host_volumes.json"),
		VolumesDir: dir, PluginDir: c.cfg.HostVolumePluginDir, NodeID: c.nodeID,
		Static: c.cfg.HostVolumes, Changed: c.UpdateNode, Logger: c.logger.Named("host-volumes"),
	})
	if err != nil {
		return err
	}
	// A failed or slow restore is logged; the volume is not advertised (a
	// task must not get a directory its plugin did not make ready) until
	// the background retry restores it.
	_ = m.Restore(c.ctx)
	for name, hv := range m.Volumes() {
		if _, ok := c.cfg.HostVolumes[name]; ok {
			c.logger.Warn("a static host_volume of the config has the name of a dynamic host volume; the dynamic one is used",
				"name", name, "volume_id", hv.GetId(), "path", hv.GetPath())
		}
	}
	c.dynamicVolumes = m
	return nil
}

// addHostVolumeHook adds the host volume task hook to every alloc runner:
// tasks whose volume_mounts name a group volume of type "host" get the
// node's directory. It runs before the alloc runners are built.
func (c *Client) addHostVolumeHook() {
	h := c.cfg.Hooks
	h.Task = append(slices.Clone(h.Task), volumehooks.HostVolumeTaskHook(c.nodeID, c.hostVolumeInfos))
	// The claims of dynamic host volumes are reported node-detached at the
	// alloc's end through the volume reports queue (a client without CSI
	// plugins has none: its allocs' stop reports free the claims).
	if c.volumes != nil {
		h.Alloc = append(slices.Clone(h.Alloc), volumehooks.HostVolumeAllocHook(c.nodeID, c.hostVolumeInfos, c.volumes.reports))
	}
	c.cfg.Hooks = h
}

// HostVolumeCreate runs a dynamic host volume's plugin to make it here.
func (r *clientCSI) HostVolumeCreate(ctx context.Context, req *pb.HostVolumeOnNodeRequest) (*pb.HostVolumeOnNodeResponse, error) {
	if err := r.hostVolumeCall(req); err != nil {
		return nil, err
	}
	path, n, err := r.hostVolumes.Create(ctx, req.GetVolume())
	if err != nil {
		return nil, errcode.Status(err)
	}
	return &pb.HostVolumeOnNodeResponse{HostPath: path, CapacityBytes: n}, nil
}

// HostVolumeDelete runs a dynamic host volume's plugin to remove it.
func (r *clientCSI) HostVolumeDelete(ctx context.Context, req *pb.HostVolumeOnNodeRequest) (*pb.HostVolumeOnNodeResponse, error) {
	if err := r.hostVolumeCall(req); err != nil {
		return nil, err
	}
	if err := r.hostVolumes.Delete(ctx, req.GetVolume()); err != nil {
		return nil, errcode.Status(err)
	}
	return &pb.HostVolumeOnNodeResponse{}, nil
}

func (r *clientCSI) hostVolumeCall(req *pb.HostVolumeOnNodeRequest) error {
	if req.GetNodeId() != "" && req.GetNodeId() != r.nodeID {
		return errcode.Status(fmt.Errorf("host volume %q: call for node %s reached node %s: %w",
			req.GetVolume().GetName(), req.GetNodeId(), r.nodeID, ErrWrongNode))
	}
	if r.hostVolumes == nil {
		return errcode.Status(fmt.Errorf("host volume %q on node %s: %w", req.GetVolume().GetName(), r.nodeID, ErrNoHostVolumes))
	}
	return nil
}

// ErrNoHostVolumes is returned by host volume calls on a client built
// without dynamic host volumes.
var ErrNoHostVolumes = errcode.New(codes.FailedPrecondition, "this client makes no dynamic host volumes")
