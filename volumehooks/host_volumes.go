package volumehooks

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

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
// BERTH_VOLUME_<NAME> — under an unisolated one; for a read-only mount
// there, a read-only bind mount of the host path in the task's directory
// (readOnlyBind, as a CSI volume's read-only mount gets), removed when the
// attempt exits and at the task's destroy.

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
		var sources []string
		for _, m := range t.GetVolumeMounts() {
			if r := a.Group.GetVolumes()[m.GetVolume()]; r.GetType() == "host" {
				mounts = append(mounts, m)
				sources = append(sources, r.GetSource())
			}
		}
		if len(mounts) == 0 {
			return nil
		}
		return &hostMountHook{nodeID: nodeID, volumes: volumes, mounts: mounts, sources: sources}
	}
}

type hostMountHook struct {
	nodeID  string
	volumes func() map[string]*pb.HostVolumeInfo
	mounts  []*pb.VolumeMount
	// sources are the host volumes the mounts name.
	sources []string
	// binds are the keys of the read-only binds Prestart made; unbind
	// also tries the keys the sources have now (a restarted client's
	// hook made none itself).
	mu    sync.Mutex
	binds []string
}

// Exited removes the task's read-only bind mounts of host volumes.
func (h *hostMountHook) Exited(_ context.Context, req *runhooks.ExitedRequest) error {
	return h.unbind(req.Dir.Dir)
}

// Destroy removes them before the alloc dir that holds them goes.
func (h *hostMountHook) Destroy(_ context.Context, req *runhooks.TaskDestroyRequest) error {
	return h.unbind(req.Dir.Dir)
}

func (h *hostMountHook) unbind(taskDir string) error {
	h.mu.Lock()
	keys := slices.Clone(h.binds)
	h.binds = nil
	h.mu.Unlock()
	have := h.volumes()
	for _, src := range h.sources {
		keys = append(keys, hostBindKey(src, have[src]), hostBindKey(src, nil))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var mounts []taskMount
	for _, k := range keys {
		mounts = append(mounts, taskMount{vol: csiVolume{volumeID: k, name: k}})
	}
	return (&mountHook{mounts: mounts}).unmountReadOnly(taskDir)
}

var (
	_ runhooks.PrestartHook    = (*hostMountHook)(nil)
	_ runhooks.ExitedHook      = (*hostMountHook)(nil)
	_ runhooks.TaskDestroyHook = (*hostMountHook)(nil)
)

// hostBindKey names a host volume's read-only bind in a task's directory:
// its ID for a dynamic one, "host-<name>" for a static one.
func hostBindKey(source string, hv *pb.HostVolumeInfo) string {
	if id := hv.GetId(); id != "" {
		return id
	}
	return "host-" + source
}

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
		readOnly := m.GetReadOnly() || vreq.GetReadOnly() || hv.GetReadOnly()
		switch {
		case isolated:
			where = m.GetDestination()
			resp.Mounts = append(resp.Mounts, &driverpb.Mount{HostPath: hv.GetPath(), TaskPath: where,
				ReadOnly: readOnly, Propagation: MountPropagation(m.GetPropagationMode())})
		case readOnly:
			key := hostBindKey(vreq.GetSource(), hv)
			var err error
			if where, err = readOnlyBind(req, taskMount{mount: m, vol: csiVolume{name: name, req: vreq, volumeID: key}, path: hv.GetPath()}); err != nil {
				return err
			}
			h.mu.Lock()
			h.binds = append(h.binds, key)
			h.mu.Unlock()
		}
		resp.Env[EnvName(name)] = where
		resp.Vars[VarVolumePrefix+name] = where
	}
	return nil
}

// HostReports is where the host volume alloc hook queues its reports
// (the client's Reporter).
type HostReports interface {
	Queue(req *pb.ClientClaimUpdateRequest)
}

// HostVolumeAllocHook is the factory of host volume alloc hooks, for
// allocrunner.Hooks.Alloc: a hook for each alloc whose group names a
// dynamic host volume of the node, nil for the others. Once every task of
// the alloc is dead for good (Postrun) it reports each such volume's
// claim node-detached, as a CSI volume's teardown does: nothing on the
// node is to be undone, and the state machine frees a releasing claim
// with no attachment at once. A claim the servers have not moved to
// releasing yet refuses the report, which the Reporter tries again until
// the claim is releasing or freed (the alloc's stop report frees it).
func HostVolumeAllocHook(nodeID string, volumes func() map[string]*pb.HostVolumeInfo, reports HostReports) func(runhooks.AllocInfo) runhooks.Hook {
	return func(a runhooks.AllocInfo) runhooks.Hook {
		var sources []string
		for _, name := range slices.Sorted(maps.Keys(a.Group.GetVolumes())) {
			if r := a.Group.GetVolumes()[name]; r.GetType() == "host" {
				sources = append(sources, r.GetSource())
			}
		}
		if len(sources) == 0 || reports == nil {
			return nil
		}
		return &hostClaimHook{nodeID: nodeID, volumes: volumes, reports: reports, sources: sources}
	}
}

type hostClaimHook struct {
	nodeID  string
	volumes func() map[string]*pb.HostVolumeInfo
	reports HostReports
	sources []string
}

var _ runhooks.PostrunHook = (*hostClaimHook)(nil)

func (h *hostClaimHook) Name() string { return "host_volume_claims" }

// Postrun reports the alloc's dynamic host volume claims node-detached.
func (h *hostClaimHook) Postrun(_ context.Context, req *runhooks.PostrunRequest) error {
	have := h.volumes()
	seen := map[string]bool{}
	for _, src := range h.sources {
		id := have[src].GetId()
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		h.reports.Queue(&pb.ClientClaimUpdateRequest{NodeId: h.nodeID, AllocId: req.Alloc.GetId(), VolumeId: id,
			State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED})
	}
	return nil
}
