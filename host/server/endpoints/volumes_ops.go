package endpoints

import (
	"context"
	"errors"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops"
	"berth.dev/berth/host/volumespec"
	"berth.dev/berth/rpc/pb"
)

// CreateSnapshot snapshots a registered volume with a healthy controller
// of its plugin.
func (e *volumesEndpoint) CreateSnapshot(ctx context.Context, req *pb.SnapshotCreateRequest) (*pb.SnapshotCreateResponse, error) {
	v, err := e.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if req.GetName() == "" {
		return nil, fmt.Errorf("snapshot of volume %q: %w: name is required", v.GetId(), volumespec.ErrInvalidVolume)
	}
	c, nodeID, _, err := e.controller(v.GetPluginId(), volumeloops.CapSnapshot)
	if err != nil {
		return nil, fmt.Errorf("snapshot of volume %q: %w", v.GetId(), err)
	}
	secrets := req.GetSecrets()
	if len(secrets) == 0 {
		secrets = v.GetSecrets()
	}
	resp, err := c.Controller.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{
		SourceVolumeId: v.GetExternalId(), Name: req.GetName(), Secrets: secrets, Parameters: req.GetParameters()})
	if err != nil {
		return nil, fmt.Errorf("snapshot %q of volume %q with plugin %q on node %s: %w", req.GetName(), v.GetId(), v.GetPluginId(), nodeID, err)
	}
	return &pb.SnapshotCreateResponse{Snapshot: snapshotOf(resp.GetSnapshot(), v.GetPluginId(), map[string]string{v.GetExternalId(): v.GetId()})}, nil
}

// DeleteSnapshot deletes a snapshot with a healthy controller of the
// plugin; one the plugin does not know is deleted already.
func (e *volumesEndpoint) DeleteSnapshot(ctx context.Context, req *pb.SnapshotDeleteRequest) (*pb.SnapshotDeleteResponse, error) {
	if req.GetPluginId() == "" || req.GetSnapshotId() == "" {
		return nil, fmt.Errorf("snapshot delete: %w: plugin_id and snapshot_id are required", volumespec.ErrInvalidVolume)
	}
	c, nodeID, _, err := e.controller(req.GetPluginId(), volumeloops.CapSnapshot)
	if err != nil {
		return nil, fmt.Errorf("deleting snapshot %q: %w", req.GetSnapshotId(), err)
	}
	if _, err := c.Controller.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: req.GetSnapshotId(), Secrets: req.GetSecrets()}); err != nil {
		return nil, fmt.Errorf("deleting snapshot %q with plugin %q on node %s: %w", req.GetSnapshotId(), req.GetPluginId(), nodeID, err)
	}
	return &pb.SnapshotDeleteResponse{}, nil
}

// ListSnapshots pages the plugin's snapshots (of one volume when
// volume_id is given) with the plugin's own tokens.
func (e *volumesEndpoint) ListSnapshots(ctx context.Context, req *pb.SnapshotListRequest) (*pb.SnapshotListResponse, error) {
	n, err := PerPage(req.GetQuery())
	if err != nil {
		return nil, err
	}
	if err := RefuseBlocking(req.GetQuery(), "the snapshot list", "snapshots are the plugin's, not the servers' state"); err != nil {
		return nil, err
	}
	pluginID, source := req.GetPluginId(), ""
	secrets := req.GetSecrets()
	if req.GetVolumeId() != "" {
		v, err := e.volume(req.GetVolumeId())
		if err != nil {
			return nil, err
		}
		if pluginID != "" && pluginID != v.GetPluginId() {
			return nil, fmt.Errorf("snapshots of volume %q: %w: it is plugin %q's, not %q's", v.GetId(), volumespec.ErrInvalidVolume, v.GetPluginId(), pluginID)
		}
		pluginID, source = v.GetPluginId(), v.GetExternalId()
		if len(secrets) == 0 {
			secrets = v.GetSecrets()
		}
	}
	if pluginID == "" {
		return nil, fmt.Errorf("snapshot list: %w: plugin_id or volume_id is required", volumespec.ErrInvalidVolume)
	}
	c, nodeID, _, err := e.controller(pluginID, volumeloops.CapListSnapshots)
	if err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", err)
	}
	resp, err := c.Controller.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{
		MaxEntries: int32(n), StartingToken: req.GetQuery().GetNextToken(), SourceVolumeId: source, Secrets: secrets})
	if err != nil {
		return nil, fmt.Errorf("listing the snapshots of plugin %q on node %s: %w", pluginID, nodeID, err)
	}
	vols, err := e.s.State().VolumesByPlugin(nil, pluginID)
	if err != nil {
		return nil, err
	}
	byExternal := map[string]string{}
	for _, v := range vols {
		byExternal[v.GetExternalId()] = v.GetId()
	}
	out := &pb.SnapshotListResponse{Meta: e.s.QueryMeta(0)}
	for _, en := range resp.GetEntries() {
		out.Snapshots = append(out.Snapshots, snapshotOf(en.GetSnapshot(), pluginID, byExternal))
	}
	out.Meta.NextToken = resp.GetNextToken()
	return out, nil
}

func snapshotOf(s *csipb.Snapshot, pluginID string, byExternal map[string]string) *pb.Snapshot {
	return &pb.Snapshot{
		Id: s.GetSnapshotId(), PluginId: pluginID, VolumeId: byExternal[s.GetSourceVolumeId()],
		ExternalSourceVolumeId: s.GetSourceVolumeId(), SizeBytes: s.GetSizeBytes(),
		CreatedAt: s.GetCreationTime().AsTime().UnixNano(), ReadyToUse: s.GetReadyToUse(),
	}
}

// Expand grows a volume with a healthy controller of its plugin, then,
// when the plugin asks for it, on every node holding the volume
// (finishExpand, volumes_expand.go), and records the capacity it answers.
func (e *volumesEndpoint) Expand(ctx context.Context, req *pb.VolumeExpandRequest) (*pb.VolumeExpandResponse, error) {
	v, err := e.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	lo, hi := req.GetCapacityMinBytes(), req.GetCapacityMaxBytes()
	switch {
	case lo <= 0 && hi <= 0:
		return nil, fmt.Errorf("expanding volume %q: %w: capacity_min or capacity_max is required", v.GetId(), volumespec.ErrInvalidVolume)
	case lo < 0 || hi < 0 || (hi > 0 && lo > hi):
		return nil, fmt.Errorf("expanding volume %q: %w: capacity_min %d and capacity_max %d", v.GetId(), volumespec.ErrInvalidVolume, lo, hi)
	case hi > 0 && hi < v.GetCapacityBytes():
		return nil, fmt.Errorf("expanding volume %q: %w: capacity_max %d is below its capacity %d (volumes only grow)", v.GetId(), volumespec.ErrInvalidVolume, hi, v.GetCapacityBytes())
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	secrets := req.GetSecrets()
	if len(secrets) == 0 {
		secrets = v.GetSecrets()
	}
	nodeID, info, has, err := controllerFor(e.s.State().Snapshot(), v.GetPluginId(), volumeloops.CapExpand)
	if errors.Is(err, ErrPluginCannot) {
		// A controller service without EXPAND_VOLUME: CSI lets a plugin
		// expand on the controller, the node or both, so its node
		// instances may still expand it alone.
		can, nerr := e.nodesCanExpand(v.GetPluginId())
		if nerr != nil {
			return nil, nerr
		}
		if can {
			return e.expandNodeOnly(ctx, v, lo, hi, secrets)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("expanding volume %q: %w", v.GetId(), err)
	}
	if !has {
		// A node-only plugin: CSI has the CO call NodeExpandVolume alone.
		return e.expandNodeOnly(ctx, v, lo, hi, secrets)
	}
	c := volumeloops.ClientVia(e.calls, e.s.Logger, nodeID, v.GetPluginId(), csi.InstanceOf(info))
	ereq := &csipb.ControllerExpandVolumeRequest{VolumeId: v.GetExternalId(), CapacityRange: &csipb.CapacityRange{RequiredBytes: lo, LimitBytes: hi}, Secrets: secrets}
	if caps := CSICapabilities(v); len(caps) > 0 {
		ereq.VolumeCapability = caps[0]
	}
	resp, err := c.Controller.ControllerExpandVolume(ctx, ereq)
	if err != nil {
		return nil, fmt.Errorf("expanding volume %q with plugin %q on node %s: %w", v.GetId(), v.GetPluginId(), nodeID, err)
	}
	return e.finishExpand(ctx, v, resp, lo, hi, secrets)
}

// recordExpansion stores the expand's outcome on the volume as read
// (read, before the plugin's call), only if it has not changed since: a
// register or a mirror update made meanwhile is not undone. capacity is
// what the plugin made; complete is whether it is made everywhere (else
// it is left pending for the nodes; see finishExpand). On a change it
// reads the volume again and computes the outcome again on that copy
// (expansionOn: another expand's larger capacity or pending size is
// kept), unless the volume is no longer the one the plugin expanded
// (another plugin or external ID: Aborted); a second change is answered
// Aborted (fsm.ErrVolumeChanged).
func (e *volumesEndpoint) recordExpansion(ctx context.Context, read *pb.Volume, capacity int64, complete bool, lo, hi int64) (*pb.VolumeRegisterResponse, error) {
	v := read
	for try := 0; ; try++ {
		nv := proto.CloneOf(v)
		nv.CapacityBytes, nv.NodeExpansionPendingBytes = expansionOn(v, capacity, complete)
		nv.RequestedCapacityMinBytes, nv.RequestedCapacityMaxBytes = lo, hi
		reg, err := e.registerIf(ctx, nv, v.GetModifyIndex(), nil)
		if err == nil || !errors.Is(err, fsm.ErrVolumeChanged) || try == 1 {
			return reg, err
		}
		cur, err := e.volume(read.GetId())
		if err != nil {
			return nil, err
		}
		if cur.GetPluginId() != read.GetPluginId() || cur.GetExternalId() != read.GetExternalId() {
			return nil, fmt.Errorf("volume %q: %w: it was registered again as plugin %q's %q during the expand of %q's %q",
				read.GetId(), fsm.ErrVolumeChanged, cur.GetPluginId(), cur.GetExternalId(), read.GetPluginId(), read.GetExternalId())
		}
		v = cur
	}
}
