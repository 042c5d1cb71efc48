//go:build linux

package hostpath

import (
	"context"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// Publish context keys: what ControllerPublishVolume tells the node plugin.
const (
	// PublishContextNode is the node the volume was attached to; a node
	// plugin with another ID refuses to stage it.
	PublishContextNode = "hostpath.csi.berth.dev/node"
	// PublishContextPool is the pool (state directory) the volume lives in;
	// a node plugin serving another pool cannot reach it.
	PublishContextPool = "hostpath.csi.berth.dev/pool"
	// PublishContextKind is "mount" or "block".
	PublishContextKind = "hostpath.csi.berth.dev/kind"
	// PublishContextReadOnly is "true" when the attachment is read-only;
	// the node then mounts read-only whatever NodePublishVolume asks.
	PublishContextReadOnly = "hostpath.csi.berth.dev/readonly"
)

func (c *controller) publishContext(v *volumeRecord, nodeID string, a *attachment) map[string]string {
	return map[string]string{
		PublishContextNode:     nodeID,
		PublishContextPool:     c.pool,
		PublishContextKind:     v.Kind,
		PublishContextReadOnly: strconv.FormatBool(a.ReadOnly),
	}
}

// ControllerPublishVolume attaches a volume to a node: it records the
// attachment, enforcing that volumes without a MULTI_NODE access mode are
// attached to one node at a time, that single-writer modes have one writer,
// the node's volume limit and the volume's topology.
func (c *controller) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	volID, nodeID := req.GetVolumeId(), req.GetNodeId()
	if c.cfg.NoPublish {
		return nil, errNoPublish("ControllerPublishVolume")
	}
	if volID == "" {
		return nil, errInvalid("volume_id is missing")
	}
	if nodeID == "" {
		return nil, errInvalid("volume %s: node_id is missing", volID)
	}
	vc, err := parseCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, errInvalid("volume %s: volume_capability: %v", volID, err)
	}
	if !validID(volumePrefix, volID) {
		return nil, errNotFound("volume %s does not exist", volID)
	}
	unlock, err := c.locks.lock(ctx, "volume/"+volID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	v := c.volume(volID)
	if v == nil {
		return nil, errNotFound("volume %s does not exist", volID)
	}
	node, err := c.lay.loadNode(nodeID)
	if isNotExist(err) {
		return nil, c.errNodeUnknown(volID, nodeID)
	}
	if err != nil {
		return nil, errInternal(err, "volume %s: read registration of node %q", volID, nodeID)
	}
	if vc.kind != v.Kind {
		return nil, errInvalid("volume %s is a %s volume; it cannot be published with %s access", volID, v.Kind, vc.kind)
	}
	if !accessibleFrom(v.Topology, node.Topology) {
		return nil, errPrecondition("volume %s lies in topology %s; node %q (%s) cannot reach it",
			volID, formatTopology(v.Topology[0]), nodeID, formatTopology(node.Topology))
	}
	readOnly := req.GetReadonly() || isReaderOnly(vc.mode)
	if a, ok := v.Attachments[nodeID]; ok {
		if !sameCapability(a.Capability, req.GetVolumeCapability()) || a.ReadOnly != readOnly {
			return nil, errExists("volume %s is already published to node %q with another capability or readonly flag (readonly=%t)", volID, nodeID, a.ReadOnly)
		}
		return &csi.ControllerPublishVolumeResponse{PublishContext: c.publishContext(v, nodeID, a)}, nil
	}
	if err := checkAttachConflicts(v, nodeID, vc.mode, readOnly); err != nil {
		return nil, err
	}

	// The node's volume count is checked and changed under the node's lock,
	// so parallel publishes of different volumes cannot overshoot it.
	unlockNode, err := c.locks.lock(ctx, "node/"+nodeID)
	if err != nil {
		return nil, err
	}
	defer unlockNode()
	if node.MaxVolumes > 0 {
		if n := c.attachedCount(nodeID); n >= node.MaxVolumes {
			return nil, errExhausted("volume %s: node %q already has %d volumes attached, its maximum", volID, nodeID, n)
		}
	}
	a := &attachment{Capability: encodeCapability(req.GetVolumeCapability()), ReadOnly: readOnly, AttachedAt: c.now().UTC()}
	nv := v.clone()
	nv.Attachments[nodeID] = a
	if err := c.putVolume(nv); err != nil {
		return nil, errInternal(err, "volume %s: record attachment to node %q", volID, nodeID)
	}
	c.log.Info("volume published", "volume", volID, "node", nodeID, "mode", modeName(vc.mode), "readonly", readOnly)
	return &csi.ControllerPublishVolumeResponse{PublishContext: c.publishContext(nv, nodeID, a)}, nil
}

// checkAttachConflicts applies the access-mode rules between a new
// attachment and the volume's attachments to other nodes.
func checkAttachConflicts(v *volumeRecord, nodeID string, mode csi.VolumeCapability_AccessMode_Mode, readOnly bool) error {
	writer := !readOnly
	for _, other := range v.publishedNodes() {
		if other == nodeID {
			continue
		}
		a := v.Attachments[other]
		otherCap, err := decodeCapability(a.Capability)
		if err != nil {
			return errInternal(err, "volume %s: decode attachment to node %q", v.ID, other)
		}
		otherMode := otherCap.GetAccessMode().GetMode()
		if !isMultiNode(mode) || !isMultiNode(otherMode) {
			return errPrecondition("volume %s is already published to node %q with access mode %s; without a MULTI_NODE access mode it can be published to one node at a time",
				v.ID, other, modeName(otherMode))
		}
		if writer && !a.ReadOnly && (singleWriter(mode) || singleWriter(otherMode)) {
			return errPrecondition("volume %s already has a writer on node %q (access mode %s); a single-writer volume takes one writer at a time",
				v.ID, other, modeName(otherMode))
		}
	}
	return nil
}

func (c *controller) attachedCount(nodeID string) int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var n int64
	for _, v := range c.volumes {
		if _, ok := v.Attachments[nodeID]; ok {
			n++
		}
	}
	return n
}

// ControllerUnpublishVolume removes an attachment (all of a volume's
// attachments when node_id is empty). Unknown volumes and nodes count as
// unpublished: a node that is gone must never keep a volume stuck.
func (c *controller) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	volID, nodeID := req.GetVolumeId(), req.GetNodeId()
	if c.cfg.NoPublish {
		return nil, errNoPublish("ControllerUnpublishVolume")
	}
	if volID == "" {
		return nil, errInvalid("volume_id is missing")
	}
	if !validID(volumePrefix, volID) {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	unlock, err := c.locks.lock(ctx, "volume/"+volID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	v := c.volume(volID)
	if v == nil {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	var removed []string
	nv := v.clone()
	for n := range v.Attachments {
		if nodeID == "" || n == nodeID {
			delete(nv.Attachments, n)
			removed = append(removed, n)
		}
	}
	if len(removed) == 0 {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if err := c.putVolume(nv); err != nil {
		return nil, errInternal(err, "volume %s: remove attachment to node(s) %s", volID, strings.Join(removed, ", "))
	}
	c.log.Info("volume unpublished", "volume", volID, "nodes", removed)
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
