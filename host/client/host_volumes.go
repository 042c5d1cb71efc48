package client

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/volumehooks"
)

// hostVolumeInfos returns a copy of the node's host volumes for its
// registration.
func (c *Client) hostVolumeInfos() map[string]*pb.HostVolumeInfo {
	if len(c.cfg.HostVolumes) == 0 {
		return nil
	}
	out := make(map[string]*pb.HostVolumeInfo, len(c.cfg.HostVolumes))
	for name, hv := range c.cfg.HostVolumes {
		out[name] = proto.CloneOf(hv)
	}
	return out
}

// addHostVolumeHook adds the host volume task hook to every alloc runner:
// tasks whose volume_mounts name a group volume of type "host" get the
// node's directory. It runs before the alloc runners are built.
func (c *Client) addHostVolumeHook() {
	vols := maps.Clone(c.cfg.HostVolumes)
	h := c.cfg.Hooks
	h.Task = append(slices.Clone(h.Task), volumehooks.HostVolumeTaskHook(c.nodeID,
		func() map[string]*pb.HostVolumeInfo { return vols }))
	c.cfg.Hooks = h
}
