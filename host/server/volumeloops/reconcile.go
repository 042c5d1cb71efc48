package volumeloops

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/csi"
	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// The reconcile pass is the second chance, never the fast path: every
// reconcile interval, for each plugin that requires a controller publish
// and has a usable controller with LIST_VOLUMES_PUBLISHED_NODES, it lists
// the controller's volumes and compares their published nodes with the
// attachments of berth's volumes of that plugin:
//
//   - attached, but the controller does not list the node: published
//     again (ControllerPublishVolume is idempotent), the repair recorded on
//     the attachment (last_error with code OK naming it, attempts+1) or,
//     when the publish fails, the failure with its class;
//   - listed on a node that has no attachment of the volume (a detach
//     whose node was gone, down or fenced before any CSI node ID was
//     recorded, a publish the controller made after berth gave up on it
//     or whose outcome a lost leadership never wrote): unpublished. There is no row to
//     record this on; it is logged at warn level with volume and node.
//     (A deregister, -force included, never leaves such a publish: it is
//     refused while the volume has an attachment, and a volume that is
//     not registered any more is not compared at all.)
//     Once the unpublish succeeded, each attaching attachment of the
//     volume that waits on a final error is marked to be tried again
//     (retryRefusedPublishes): a single-node volume published elsewhere is
//     refused final (FailedPrecondition), and the orphan may have been
//     why.
//
// Volumes the controller lists that are not berth's are left alone (a
// storage system may serve others). Attaching and detaching attachments
// are the attach reconciler's. The pass holds the plugin's lock from the
// list to the last repair, and reads the state after the list: no publish
// or unpublish of this leader runs meanwhile, and every outcome written
// before the list is in what it compares.

// reconcileMaxPages bounds one ListVolumes walk.
const reconcileMaxPages = 1000

// runReconcile runs a pass every reconcile interval until ctx ends.
func (v *Loops) runReconcile(ctx context.Context) {
	if v.cfg.reconcileInterval <= 0 {
		return
	}
	tick := make(chan struct{}, 1)
	for {
		t := v.clock.AfterFunc(v.cfg.reconcileInterval, func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-tick:
		}
		v.reconcilePass(ctx)
	}
}

// reconcilePass reconciles every plugin that can be and returns how many
// repairs it made.
func (v *Loops) reconcilePass(ctx context.Context) int {
	snap := v.state().Snapshot()
	plugins, _, err := snap.CSIPluginsPage(nil, "", 0, func(p *pb.CSIPlugin) bool { return p.GetControllerRequired() })
	if err != nil {
		v.logger.Error("reconcile: reading plugins", "error", err)
		return 0
	}
	repairs := 0
	for _, p := range plugins {
		if ctx.Err() != nil {
			return repairs
		}
		n, err := v.reconcilePlugin(ctx, p.GetId())
		repairs += n
		if err != nil && ctx.Err() == nil {
			v.logger.Warn("reconcile: plugin skipped", "plugin", p.GetId(), "error", err)
		}
	}
	return repairs
}

// reconcilePlugin compares one plugin's published volumes with the
// attachments and repairs the drift; it returns the repairs made.
func (v *Loops) reconcilePlugin(ctx context.Context, pluginID string) (int, error) {
	lock := v.pluginLock(pluginID)
	lock.Lock()
	defer lock.Unlock()

	controller, err := v.listingController(pluginID)
	if err != nil || controller == "" {
		return 0, err
	}
	published := map[string]map[string]bool{} // external volume ID → CSI node IDs
	token := ""
	for page := 0; ; page++ {
		if page == reconcileMaxPages {
			return 0, fmt.Errorf("ListVolumes through the controller on node %s: more than %d pages; the pass compares only complete lists", controller, reconcileMaxPages)
		}
		resp := &csipb.ListVolumesResponse{}
		if err := v.call(ctx, controller, pluginID, nil, csipb.Controller_ListVolumes_FullMethodName, &csipb.ListVolumesRequest{StartingToken: token}, resp); err != nil {
			return 0, fmt.Errorf("ListVolumes through the controller on node %s: %w", controller, err)
		}
		for _, e := range resp.GetEntries() {
			id := e.GetVolume().GetVolumeId()
			if published[id] == nil {
				published[id] = map[string]bool{}
			}
			for _, n := range e.GetStatus().GetPublishedNodeIds() {
				published[id][n] = true
			}
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
	}

	// The state is read after the list: see the comment at the top.
	snap := v.state().Snapshot()
	vols, err := snap.VolumesByPlugin(nil, pluginID)
	if err != nil {
		return 0, err
	}
	plugin, err := snap.CSIPluginByID(nil, pluginID)
	if err != nil {
		return 0, err
	}
	nodeOf := map[string]string{} // CSI node ID → berth node ID
	for id, inst := range plugin.GetNodes() {
		if c := inst.GetNodeInfo().GetId(); c != "" {
			nodeOf[c] = id
		}
	}
	repairs := 0
	for _, vol := range vols {
		atts, err := snap.AttachmentsByVolume(nil, vol.GetId())
		if err != nil {
			return repairs, err
		}
		onNode := map[string]*pb.Attachment{}
		// held: the CSI node IDs this volume's attachments named, which
		// stay theirs after their node is gone.
		held := map[string]bool{}
		for _, a := range atts {
			onNode[a.GetNodeId()] = a
			if c := a.GetCsiNodeId(); c != "" {
				held[c] = true
			}
		}
		listed := published[vol.GetExternalId()]
		for _, a := range atts {
			if a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHED {
				continue
			}
			csiNode, err := attachmentCSINode(snap, a)
			if err != nil || listed[csiNode] {
				continue
			}
			if node, err := snap.NodeByID(nil, a.GetNodeId()); err != nil || node == nil {
				// Gone: nothing to publish to; its detach unpublishes.
				continue
			}
			if ctx.Err() != nil {
				return repairs, ctx.Err()
			}
			v.republish(ctx, snap, a, controller)
			repairs++
		}
		for _, csiNode := range slices.Sorted(maps.Keys(listed)) {
			if node, known := nodeOf[csiNode]; held[csiNode] || known && onNode[node] != nil {
				continue
			}
			if ctx.Err() != nil {
				return repairs, ctx.Err()
			}
			v.unpublishOrphan(ctx, vol, csiNode, nodeOf[csiNode], controller)
			repairs++
		}
	}
	return repairs, nil
}

// listingController picks a usable controller of the plugin that lists
// published nodes; "" (no error) when the plugin's controllers cannot.
func (v *Loops) listingController(pluginID string) (string, error) {
	controller, err := PickController(v.state().Snapshot(), pluginID, CapListPublished, "")
	if errors.Is(err, ErrNoCapableController) {
		return "", nil
	}
	return controller, err
}

// republish publishes an attached attachment the controller does not list
// again and records the repair on it.
func (v *Loops) republish(ctx context.Context, snap *fsm.StateSnapshot, a *pb.Attachment, controller string) {
	req, err := publishRequest(snap, a)
	if err == nil {
		err = v.call(ctx, controller, a.GetPluginId(), nil, csipb.Controller_ControllerPublishVolume_FullMethodName, req, &csipb.ControllerPublishVolumeResponse{})
	}
	if ctx.Err() != nil {
		return
	}
	now := v.clock.Now()
	rec := &pb.VolumeError{FailedAt: now.UnixNano(),
		Message: fmt.Sprintf("reconcile: the controller on node %s did not list volume %s as published to node %s; published again", controller, a.GetVolumeId(), a.GetNodeId())}
	if err != nil {
		code := errcode.Code(err)
		rec.Code = pb.GrpcCode(code)
		rec.Class = pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL
		if csi.UncertainCode(code) {
			rec.Class = pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN
		}
		rec.Message = fmt.Sprintf("reconcile: the controller on node %s did not list volume %s as published to node %s; publishing it again failed: %v",
			controller, a.GetVolumeId(), a.GetNodeId(), err)
		v.logger.Warn("reconcile: republish failed", "volume", a.GetVolumeId(), "node", a.GetNodeId(), "controller", controller, "error", err)
	} else {
		v.logger.Warn("reconcile: volume published again", "volume", a.GetVolumeId(), "node", a.GetNodeId(), "controller", controller)
	}
	v.writeAttachment(ctx, a, &pb.AttachmentUpdateCommand{
		VolumeId: a.GetVolumeId(), NodeId: a.GetNodeId(), State: a.GetState(), ControllerNodeId: controller,
		Error: rec, Attempts: a.GetAttempts() + 1, UpdatedAt: now.UnixNano(),
	})
}

// unpublishOrphan unpublishes a volume the controller lists on a node that
// has no attachment of it.
func (v *Loops) unpublishOrphan(ctx context.Context, vol *pb.Volume, csiNode, node, controller string) {
	req := &csipb.ControllerUnpublishVolumeRequest{VolumeId: vol.GetExternalId(), NodeId: csiNode, Secrets: vol.GetSecrets()}
	err := v.call(ctx, controller, vol.GetPluginId(), nil, csipb.Controller_ControllerUnpublishVolume_FullMethodName, req, &csipb.ControllerUnpublishVolumeResponse{})
	if ctx.Err() != nil {
		return
	}
	if err != nil && errcode.Code(err) != codes.NotFound {
		v.logger.Warn("reconcile: unpublishing a volume no attachment holds failed; the next pass tries again",
			"volume", vol.GetId(), "csi_node", csiNode, "node", node, "controller", controller, "error", err)
		return
	}
	v.logger.Warn("reconcile: unpublished a volume no attachment holds", "volume", vol.GetId(), "csi_node", csiNode, "node", node, "controller", controller)
	v.retryRefusedPublishes(ctx, vol, csiNode, controller)
}

// retryRefusedPublishes marks the volume's attaching attachments that wait
// on a final error to be tried again, now that an orphan publish of the
// volume (to csiNode) is undone: a final error waits for a change of a row
// (attachmentDue), and this pass changes none. The mark is an
// AttachmentUpdate in the same state recording the repair (code OK,
// attempts+1, no class: due at once), written through raft rather than
// kept in this leader's memory: a leader that loses its leadership between
// this write and the publish leaves the mark to the next, which would
// otherwise find neither the orphan (unpublished) nor a row to wake it.
func (v *Loops) retryRefusedPublishes(ctx context.Context, vol *pb.Volume, csiNode, controller string) {
	atts, err := v.state().Snapshot().AttachmentsByVolume(nil, vol.GetId())
	if err != nil {
		v.logger.Error("reconcile: reading attachments", "volume", vol.GetId(), "error", err)
		return
	}
	now := v.clock.Now()
	for _, a := range atts {
		if a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHING || a.GetLastError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		v.logger.Info("reconcile: publish refused before the orphan was unpublished; trying again", "volume", a.GetVolumeId(), "node", a.GetNodeId(), "csi_node", csiNode)
		v.writeAttachment(ctx, a, &pb.AttachmentUpdateCommand{
			VolumeId: a.GetVolumeId(), NodeId: a.GetNodeId(), State: a.GetState(),
			Error: &pb.VolumeError{FailedAt: now.UnixNano(), Message: fmt.Sprintf(
				"reconcile: the controller on node %s unpublished volume %s from CSI node %s, which no attachment held; publishing to node %s again (the last try failed: %s)",
				controller, a.GetVolumeId(), csiNode, a.GetNodeId(), a.GetLastError().GetMessage())},
			Attempts: a.GetAttempts() + 1, UpdatedAt: now.UnixNano(),
		})
	}
}
