package volumehooks

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// Host volumes. A group volume of type "host" names a host volume of the
// node (source), a directory the node offers as it is: no plugin, no
// stage or publish, no claim for a static one. The scheduler places the
// alloc only on a node that has it (writable when the request writes), so
// the task hook only looks the directory up and hands it to the task as a
// volume_mount asks: a bind mount under an isolating driver (read-only
// when the mount, the request or the host volume is, with the mount's
// propagation_mode), the host path itself — in ${volume.<name>} and
// BERTH_VOLUME_<NAME> — under an unisolated one.

// ErrNoHostVolume is returned by a host volume task hook's Prestart when
// the node has no host volume the group volume names (the agent's config
// changed since the alloc was placed).
var ErrNoHostVolume = errcode.New(codes.FailedPrecondition, "no such host volume on the node")

// Propagation modes of a volume_mount, as the jobspec spells them.
const (
	PropagationPrivate       = "private"
	PropagationHostToTask    = "host-to-task"
	PropagationBidirectional = "bidirectional"
)

// MountPropagation maps a volume_mount's propagation_mode to the driver
// protocol's; "" is private.
func MountPropagation(mode string) driverpb.MountPropagation {
	switch mode {
	case PropagationHostToTask:
		return driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK
	case PropagationBidirectional:
		return driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL
	}
	return driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE
}

// HostVolumeTaskHook is the factory of host volume task hooks, for
// allocrunner.Hooks.Task: a hook for each task with a volume_mount naming
// a group volume of type "host", nil for the others. volumes returns the
// node's host volumes by name; nodeID names the node in errors.
func HostVolumeTaskHook(nodeID string, volumes func() map[string]*pb.HostVolumeInfo) func(runhooks.AllocInfo, *pb.Task) runhooks.Hook {
	return func(a runhooks.AllocInfo, t *pb.Task) runhooks.Hook {
		var mounts []*pb.VolumeMount
		for _, m := range t.GetVolumeMounts() {
			if a.Group.GetVolumes()[m.GetVolume()].GetType() == "host" {
				mounts = append(mounts, m)
			}
		}
		if len(mounts) == 0 {
			return nil
		}
		return &hostMountHook{nodeID: nodeID, volumes: volumes, mounts: mounts}
	}
}

type hostMountHook struct {
	nodeID  string
	volumes func() map[string]*pb.HostVolumeInfo
	mounts  []*pb.VolumeMount
}

var _ runhooks.PrestartHook = (*hostMountHook)(nil)

func (h *hostMountHook) Name() string { return "host_volume_mounts" }

// Prestart gives the task its host volumes.
func (h *hostMountHook) Prestart(ctx context.Context, req *runhooks.PrestartRequest, resp *runhooks.PrestartResponse) error {
	isolated := false
	if req.Driver != nil {
		var err error
		if isolated, err = req.Driver.HonoursMounts(ctx); err != nil {
			return fmt.Errorf("host volume mounts of task %q in alloc %s: asking driver %q whether it honours mounts: %w",
				req.Task.GetName(), req.Alloc.GetId(), req.Task.GetDriver(), err)
		}
	}
	have := h.volumes()
	resp.Env, resp.Vars = map[string]string{}, map[string]string{}
	for _, m := range h.mounts {
		name := m.GetVolume()
		vreq := req.Group.GetVolumes()[name]
		hv := have[vreq.GetSource()]
		if hv == nil {
			return fmt.Errorf("volume %q (host volume %q) of task %q, alloc %s, node %s: %w", name, vreq.GetSource(),
				req.Task.GetName(), req.Alloc.GetId(), h.nodeID, ErrNoHostVolume)
		}
		where := hv.GetPath()
		if isolated {
			where = m.GetDestination()
			resp.Mounts = append(resp.Mounts, &driverpb.Mount{HostPath: hv.GetPath(), TaskPath: where,
				ReadOnly:    m.GetReadOnly() || vreq.GetReadOnly() || hv.GetReadOnly(),
				Propagation: MountPropagation(m.GetPropagationMode())})
		}
		resp.Env[EnvName(name)] = where
		resp.Vars[VarVolumePrefix+name] = where
	}
	return nil
}
