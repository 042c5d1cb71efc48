package volumeloops

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// ErrNoController is returned by PickController when the plugin has no
// controller instance that is healthy on a ready, unfenced node: no
// controller call can be made until one comes back.
var ErrNoController = errcode.New(codes.FailedPrecondition, "no healthy controller instance of the plugin")

// ErrNoCapableController is returned by PickController when the plugin
// has controller instances and none of them advertises the capability the
// call needs: a final answer (FailedPrecondition) naming the plugin, the
// capability and each instance, until a controller that can reports.
var ErrNoCapableController = errcode.New(codes.FailedPrecondition, "no controller instance of the plugin advertises the capability the call needs")

// Cap is the controller capability a call needs, the CSI word
// operators look up in the plugin's documentation.
type Cap string

const (
	// CapAnyController is any controller (ValidateVolumeCapabilities,
	// which every controller serves).
	CapAnyController Cap = ""
	// CapPublish is PUBLISH_UNPUBLISH_VOLUME: ControllerPublishVolume and
	// ControllerUnpublishVolume.
	CapPublish Cap = "PUBLISH_UNPUBLISH_VOLUME"
	// CapCreateDelete is CREATE_DELETE_VOLUME: CreateVolume, DeleteVolume.
	CapCreateDelete Cap = "CREATE_DELETE_VOLUME"
	// CapSnapshot is CREATE_DELETE_SNAPSHOT.
	CapSnapshot Cap = "CREATE_DELETE_SNAPSHOT"
	// CapListSnapshots is LIST_SNAPSHOTS.
	CapListSnapshots Cap = "LIST_SNAPSHOTS"
	// CapExpand is EXPAND_VOLUME.
	CapExpand Cap = "EXPAND_VOLUME"
	// CapListPublished is LIST_VOLUMES with LIST_VOLUMES_PUBLISHED_NODES:
	// what the reconcile pass reads.
	CapListPublished Cap = "LIST_VOLUMES_PUBLISHED_NODES"
)

// of reports whether the instance advertises c. A controller that says it
// requires the publish (controller_required) publishes, whatever an older
// report's controller_info lacks.
func (c Cap) of(inst *pb.CSIPluginInfo) bool {
	ci := inst.GetControllerInfo()
	switch c {
	case CapPublish:
		return inst.GetControllerRequired() || ci.GetSupportsAttachDetach()
	case CapCreateDelete:
		return ci.GetSupportsCreateDelete()
	case CapSnapshot:
		return ci.GetSupportsCreateDeleteSnapshot()
	case CapListSnapshots:
		return ci.GetSupportsListSnapshots()
	case CapExpand:
		return ci.GetSupportsExpand()
	case CapListPublished:
		return ci.GetSupportsListVolumes() && ci.GetSupportsListPublishedNodes()
	}
	return true
}

// fingerprinted reports whether the controller instance's capabilities
// are known: a client reports controller_info once a fingerprint of the
// instance succeeded (an instance whose first Probe failed, or whose
// ControllerGetCapabilities answers Unimplemented, has none).
func fingerprinted(inst *pb.CSIPluginInfo) bool {
	return inst.GetControllerInfo() != nil || inst.GetControllerRequired()
}

// DescribeInstance names a controller instance for an operator: its node,
// and the alloc that runs it or that it is a storage adapter.
func DescribeInstance(nodeID string, inst *pb.CSIPluginInfo) string {
	if a := inst.GetAllocId(); a != "" {
		return fmt.Sprintf("node %s (task plugin of alloc %s)", nodeID, a)
	}
	if inst.GetSource() == pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER {
		return fmt.Sprintf("node %s (storage adapter)", nodeID)
	}
	return "node " + nodeID
}

// PickController chooses the node whose controller instance of pluginID
// makes the next controller call, among the instances that advertise
// capability: prefer (the node that made the last call for the same
// volume) when it is still usable, otherwise the usable one with the
// fewest attachments in flight (attaching or detaching) recorded against
// it, ties broken by node ID so the choice is stable. Usable: the
// instance is healthy and its node is ready and not fenced. With
// instances and none advertising capability it is ErrNoCapableController;
// with capable ones and none usable, ErrNoController.
func PickController(st *fsm.StateSnapshot, pluginID string, capability Cap, prefer string) (string, error) {
	load, err := controllerLoad(st)
	if err != nil {
		return "", err
	}
	return pickControllerFrom(st, pluginID, capability, prefer, "", load)
}

// pickControllerFrom is PickController with the load already counted (a
// reconciler pass counts it once) and a node to avoid when another is
// usable: the one whose last call could not reach it.
func pickControllerFrom(st *fsm.StateSnapshot, pluginID string, capability Cap, prefer, avoid string, load map[string]int) (string, error) {
	plugin, err := st.CSIPluginFacts(nil, pluginID)
	if err != nil {
		return "", fmt.Errorf("reading plugin %q: %w", pluginID, err)
	}
	if plugin == nil {
		return "", fmt.Errorf("plugin %q is not reported by any node: %w", pluginID, ErrNoController)
	}
	controllers, err := st.CSIPluginControllers(nil, pluginID)
	if err != nil {
		return "", fmt.Errorf("reading plugin %q: %w", pluginID, err)
	}
	var usable, why, lacking []string
	for _, id := range slices.Sorted(maps.Keys(controllers)) {
		inst := controllers[id]
		if capability != CapAnyController && !fingerprinted(inst) {
			// What it can do is not known yet: wait for its fingerprint
			// rather than call the call impossible.
			why = append(why, fmt.Sprintf("instance on node %s is not fingerprinted yet (%s)", id, inst.GetHealthDescription()))
			continue
		}
		if !capability.of(inst) {
			lacking = append(lacking, DescribeInstance(id, inst))
			continue
		}
		node, err := st.NodeByID(nil, id)
		if err != nil {
			return "", fmt.Errorf("reading node %q: %w", id, err)
		}
		switch {
		case node == nil:
			why = append(why, fmt.Sprintf("node %s is gone", id))
		case node.GetStatus() != pb.NodeStatus_NODE_STATUS_READY:
			why = append(why, fmt.Sprintf("node %s is %s", id, pb.NodeStatus_name[int32(node.GetStatus())]))
		case node.GetFenced():
			why = append(why, fmt.Sprintf("node %s is fenced", id))
		case !inst.GetHealthy():
			why = append(why, fmt.Sprintf("instance on node %s is unhealthy (%s)", id, inst.GetHealthDescription()))
		default:
			usable = append(usable, id)
		}
	}
	if len(usable) == 0 {
		switch {
		case len(why) == 0 && len(lacking) > 0:
			return "", fmt.Errorf("plugin %q: %w: none advertises %s (controller instances: %s)", pluginID, ErrNoCapableController, capability, strings.Join(lacking, "; "))
		case len(why) == 0:
			return "", fmt.Errorf("plugin %q has no controller instance: %w", pluginID, ErrNoController)
		case len(lacking) > 0:
			why = append(why, fmt.Sprintf("%s does not advertise %s", strings.Join(lacking, ", "), capability))
		}
		return "", fmt.Errorf("plugin %q: %s: %w", pluginID, strings.Join(why, "; "), ErrNoController)
	}
	if prefer != "" && prefer != avoid && slices.Contains(usable, prefer) {
		return prefer, nil
	}
	if len(usable) > 1 && avoid != "" {
		usable = slices.DeleteFunc(usable, func(id string) bool { return id == avoid })
	}
	best := usable[0]
	for _, id := range usable[1:] {
		if load[id] < load[best] {
			best = id
		}
	}
	return best, nil
}

// pluginRequiresPublish reports whether the plugin's row says its
// controllers serving now require a controller publish (true when it
// cannot be read: the caller then keeps to the safe side).
func pluginRequiresPublish(st *fsm.StateSnapshot, pluginID string) bool {
	p, err := st.CSIPluginFacts(nil, pluginID)
	return err != nil || p == nil || p.GetControllerRequired()
}

// controllerLoad counts, per controller node, the attachments in flight
// (attaching or detaching) whose last call it made.
func controllerLoad(st *fsm.StateSnapshot) (map[string]int, error) {
	load := map[string]int{}
	for _, state := range []pb.AttachmentState{pb.AttachmentState_ATTACHMENT_STATE_ATTACHING, pb.AttachmentState_ATTACHMENT_STATE_DETACHING} {
		atts, err := st.AttachmentsByState(nil, state)
		if err != nil {
			return nil, fmt.Errorf("reading %s attachments: %w", pb.EnumWord(state), err)
		}
		for _, a := range atts {
			if c := a.GetControllerNodeId(); c != "" {
				load[c]++
			}
		}
	}
	return load, nil
}
