//go:build linux

package hostpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
)

// node serves the CSI node service for one node ID. It finds volumes in the
// shared state directory and records what it staged and published under
// nodes/<node-id>/volumes, so a restarted plugin (or a crash in the middle of
// a call) picks up where it was; every call also checks the mounts themselves
// and repairs or adopts them.
type node struct {
	csi.UnimplementedNodeServer

	cfg      runtimeConfig
	lay      layout
	pool     string
	id       string
	topology map[string]string
	log      hclog.Logger
	locks    *keyedLocks
	flock    *fileLock
}

var _ csi.NodeServer = (*node)(nil)

func newNode(cfg runtimeConfig, lay layout, pool string, locks *keyedLocks) (*node, error) {
	if err := os.MkdirAll(lay.nodeVolumesDir(cfg.NodeID), 0o700); err != nil {
		return nil, err
	}
	flock, err := acquireFileLock(lay.path("nodes", cfg.NodeID, "node.lock"), fmt.Sprintf("node %q is already served from %s", cfg.NodeID, lay.root))
	if err != nil {
		return nil, err
	}
	n := &node{
		cfg: cfg, lay: lay, pool: pool, id: cfg.NodeID,
		topology: nodeTopology(cfg.Topology, pool),
		log:      cfg.Logger.Named("node"), locks: locks, flock: flock,
	}
	if err := removeLeftovers(lay.nodeVolumesDir(n.id)); err != nil {
		flock.release()
		return nil, err
	}
	reg := nodeRecord{Version: recordVersion, NodeID: n.id, Topology: n.topology, MaxVolumes: cfg.MaxVolumes, StartedAt: time.Now().UTC()}
	if err := writeRecord(lay.path("nodes", n.id, "node.json"), reg); err != nil {
		flock.release()
		return nil, fmt.Errorf("register node %q: %w", n.id, err)
	}
	n.log.Info("node registered", "node", n.id, "topology", formatTopology(n.topology), "max_volumes", cfg.MaxVolumes)
	return n, nil
}

func (n *node) close() { n.flock.release() }

// loadVolume reads a volume's record from the state directory.
func (n *node) loadVolume(id string) (*volumeRecord, error) {
	if !validID(volumePrefix, id) {
		return nil, errNotFound("volume %s does not exist", id)
	}
	v := &volumeRecord{}
	err := readRecord(filepath.Join(n.lay.volumeDir(id), "volume.json"), v)
	if isNotExist(err) {
		return nil, errNotFound("volume %s does not exist in state directory %s", id, n.lay.root)
	}
	if err != nil {
		return nil, errInternal(err, "read volume %s", id)
	}
	return v, nil
}

// loadNodeVolume reads this node's record of a volume; nil if it has none.
func (n *node) loadNodeVolume(id string) (*nodeVolumeRecord, error) {
	if !validID(volumePrefix, id) {
		return nil, nil
	}
	rec := &nodeVolumeRecord{}
	err := readRecord(n.lay.nodeVolumeFile(n.id, id), rec)
	if isNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, errInternal(err, "read node record of volume %s", id)
	}
	pruneUnpublishedTargets(rec)
	return rec, nil
}

func (n *node) saveNodeVolume(rec *nodeVolumeRecord) error {
	return writeRecord(n.lay.nodeVolumeFile(n.id, rec.VolumeID), rec)
}

func (n *node) dropNodeVolume(id string) error {
	if err := os.Remove(n.lay.nodeVolumeFile(n.id, id)); err != nil && !isNotExist(err) {
		return err
	}
	return syncDir(n.lay.nodeVolumesDir(n.id))
}

func (n *node) data(v *volumeRecord) string { return dataPath(n.lay.volumeDir(v.ID), v.Kind) }

// checkPublishContext verifies what ControllerPublishVolume said about the
// attachment and returns whether it is read-only. A CO that skips the
// controller (no publish context) is accepted.
func (n *node) checkPublishContext(volID string, pc map[string]string) (bool, error) {
	if node, ok := pc[PublishContextNode]; ok && node != n.id {
		return false, errPrecondition("volume %s was published to node %q; this is node %q", volID, node, n.id)
	}
	if pool, ok := pc[PublishContextPool]; ok && pool != n.pool {
		return false, errPrecondition("volume %s lives in storage pool %s; this node serves pool %s (state directory %s)", volID, pool, n.pool, n.lay.root)
	}
	ro := false
	if s, ok := pc[PublishContextReadOnly]; ok {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return false, errInvalid("volume %s: publish_context[%q] = %q is not a boolean", volID, PublishContextReadOnly, s)
		}
		ro = b
	}
	return ro, nil
}

func cleanAbs(field, p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s %q is not an absolute path", field, p)
	}
	return filepath.Clean(p), nil
}

// lockVolume takes the volume's lock and loads its record; the caller runs
// unlock when done.
func (n *node) lockVolume(ctx context.Context, volID string) (*volumeRecord, func(), error) {
	unlock, err := n.locks.lock(ctx, "volume/"+volID)
	if err != nil {
		return nil, nil, err
	}
	v, err := n.loadVolume(volID)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return v, unlock, nil
}

// checkAccessType refuses a mount capability for a block volume and the
// reverse: the access type is fixed when the volume is created.
func checkAccessType(v *volumeRecord, vc volCap, verb string) error {
	if vc.kind != v.Kind {
		return errPrecondition("volume %s is a %s volume; it cannot be %s with %s access", v.ID, v.Kind, verb, vc.kind)
	}
	return nil
}

// volumePath checks the volume ID and the one path argument of a node call,
// returning the cleaned path or an InvalidArgument error naming the field.
func volumePath(volID, field, path string) (string, error) {
	if volID == "" {
		return "", errInvalid("volume_id is missing")
	}
	if path == "" {
		return "", errInvalid("volume %s: %s is missing", volID, field)
	}
	p, err := cleanAbs(field, path)
	if err != nil {
		return "", errInvalid("volume %s: %v", volID, err)
	}
	return p, nil
}

// NodeStageVolume makes a volume available on this node at the staging
// path: a bind mount of the volume's directory, or a loop device for a block
// image.
func (n *node) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	volID := req.GetVolumeId()
	staging, err := volumePath(volID, "staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	vc, err := parseCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, errInvalid("volume %s: volume_capability: %v", volID, err)
	}
	ctxRO, err := n.checkPublishContext(volID, req.GetPublishContext())
	if err != nil {
		return nil, err
	}
	v, unlock, err := n.lockVolume(ctx, volID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := checkAccessType(v, vc, "staged"); err != nil {
		return nil, err
	}
	ro := ctxRO || isReaderOnly(vc.mode) || vc.flags.readOnly
	rec, err := n.loadNodeVolume(volID)
	if err != nil {
		return nil, err
	}
	if rec != nil {
		if rec.StagingPath != staging {
			return nil, errPrecondition("volume %s is already staged on node %q at %s, not %s", volID, n.id, rec.StagingPath, staging)
		}
		if !sameCapability(rec.StageCapability, req.GetVolumeCapability()) || rec.StageReadOnly != ro {
			return nil, errExists("volume %s is already staged at %s with another capability (read-only=%t)", volID, staging, rec.StageReadOnly)
		}
	} else {
		rec = &nodeVolumeRecord{
			Version: recordVersion, VolumeID: volID, Kind: v.Kind, StagingPath: staging,
			StageCapability: encodeCapability(req.GetVolumeCapability()), StageReadOnly: ro,
		}
		if v.Kind == kindMount {
			rec.CapacityBytes = v.CapacityBytes
		}
	}
	// Staging is checked and repaired on every call: a record may outlive
	// its mount (reboot) and a mount its record (crash).
	if err := n.stage(v, rec, vc); err != nil {
		return nil, errInternal(err, "stage volume %s at %s", volID, staging)
	}
	if err := n.saveNodeVolume(rec); err != nil {
		return nil, errInternal(err, "record staging of volume %s", volID)
	}
	n.log.Info("volume staged", "volume", volID, "staging_path", staging, "kind", v.Kind, "readonly", ro, "loop_device", rec.LoopDevice)
	return &csi.NodeStageVolumeResponse{}, nil
}

func (n *node) stage(v *volumeRecord, rec *nodeVolumeRecord, vc volCap) error {
	data := n.data(v)
	if v.Kind == kindBlock {
		tag := loopTag(n.id, "stage")
		if rec.LoopDevice != "" && loopBacks(rec.LoopDevice, data, rec.StageReadOnly, tag) {
			return nil
		}
		dev, ok := findLoop(data, rec.StageReadOnly, tag)
		if !ok {
			var err error
			if dev, err = attachLoop(data, rec.StageReadOnly, tag); err != nil {
				return err
			}
		}
		rec.LoopDevice = dev
		return nil
	}
	if mountedFrom(rec.StagingPath, data) {
		return nil
	}
	if mounted, err := isMountPoint(rec.StagingPath); err != nil || mounted {
		return errOrBusyPath(err, rec.StagingPath)
	}
	if err := os.MkdirAll(rec.StagingPath, 0o750); err != nil {
		return err
	}
	flags := vc.flags
	flags.readOnly = rec.StageReadOnly
	return bindMount(data, rec.StagingPath, flags)
}

func errOrBusyPath(err error, path string) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%s: %w", path, errPathInUse)
}

// restage checks the staging a record describes and repairs it (after a
// reboot, or an unmount behind the plugin's back) before a publish uses it.
func (n *node) restage(v *volumeRecord, rec *nodeVolumeRecord) error {
	stageCap, err := decodeCapability(rec.StageCapability)
	if err != nil {
		return err
	}
	vc, err := parseCapability(stageCap)
	if err != nil {
		return err
	}
	return n.stage(v, rec, vc)
}

// NodeUnstageVolume undoes NodeStageVolume. It refuses while the volume is
// still published on this node.
func (n *node) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	volID := req.GetVolumeId()
	staging, err := volumePath(volID, "staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	if !validID(volumePrefix, volID) {
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	unlock, err := n.locks.lock(ctx, "volume/"+volID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := n.loadNodeVolume(volID)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		// A crash may have staged without recording it.
		if err := n.unstageUnrecorded(volID, staging); err != nil {
			return nil, errInternal(err, "unstage volume %s from %s", volID, staging)
		}
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if rec.StagingPath != staging {
		return &csi.NodeUnstageVolumeResponse{}, nil // not staged there
	}
	if live := n.liveTargets(rec); len(live) > 0 {
		return nil, errPrecondition("volume %s is still published on node %q at %v; NodeUnpublishVolume first", volID, n.id, live)
	}
	if rec.Kind == kindBlock {
		if rec.LoopDevice != "" && loopBacks(rec.LoopDevice, dataPath(n.lay.volumeDir(volID), kindBlock), rec.StageReadOnly, loopTag(n.id, "stage")) {
			if err := detachLoop(rec.LoopDevice); err != nil {
				return nil, errInternal(err, "unstage volume %s", volID)
			}
		}
	} else if err := unmountAll(staging); err != nil {
		return nil, errInternal(err, "unstage volume %s from %s", volID, staging)
	}
	if err := n.dropNodeVolume(volID); err != nil {
		return nil, errInternal(err, "forget staging of volume %s", volID)
	}
	n.log.Info("volume unstaged", "volume", volID, "staging_path", staging)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (n *node) unstageUnrecorded(volID, staging string) error {
	dir := n.lay.volumeDir(volID)
	if data := dataPath(dir, kindMount); mountedFrom(staging, data) {
		return unmountAll(staging)
	}
	image := dataPath(dir, kindBlock)
	tag := loopTag(n.id, "stage")
	for _, ro := range []bool{false, true} {
		if dev, ok := findLoop(image, ro, tag); ok {
			if err := detachLoop(dev); err != nil {
				return err
			}
		}
	}
	return nil
}

// liveTargets lists the recorded publish targets still mounted.
func (n *node) liveTargets(rec *nodeVolumeRecord) []string {
	var live []string
	for t := range rec.Targets {
		if mounted, err := isMountPoint(t); err != nil || mounted {
			live = append(live, t)
		}
	}
	return live
}

// NodeGetCapabilities lists the node RPCs this plugin serves.
func (n *node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	types := []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH,
	}
	resp := &csi.NodeGetCapabilitiesResponse{}
	for _, t := range types {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}

// NodeGetInfo reports the node's ID, volume limit and topology (its
// configured segments plus its pool).
func (n *node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             n.id,
		MaxVolumesPerNode:  n.cfg.MaxVolumes,
		AccessibleTopology: &csi.Topology{Segments: copyMap(n.topology)},
	}, nil
}
