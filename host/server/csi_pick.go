package server

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

// ErrNoController is returned by pickController when the plugin has no
// controller instance that is healthy on a ready, unfenced node: no
// controller call can be made until one comes back.
var ErrNoController = errcode.New(codes.FailedPrecondition, "no healthy controller instance of the plugin")

// pickController chooses the node whose controller instance of pluginID
// makes the next controller call: prefer (the node that made the last
// call for the same volume) when it is still usable, otherwise the usable
// one with the fewest attachments in flight (attaching or detaching)
// recorded against it, ties broken by node ID so the choice is stable.
// Usable: the instance is healthy and its node is ready and not fenced.
func pickController(st *fsm.StateSnapshot, pluginID, prefer string) (string, error) {
	load, err := controllerLoad(st)
	if err != nil {
		return "", err
	}
	return pickControllerFrom(st, pluginID, prefer, "", load)
}

// pickControllerFrom is pickController with the load already counted (a
// reconciler pass counts it once) and a node to avoid when another is
// usable: the one whose last call could not reach it.
func pickControllerFrom(st *fsm.StateSnapshot, pluginID, prefer, avoid string, load map[string]int) (string, error) {
	plugin, err := st.CSIPluginByID(nil, pluginID)
	if err != nil {
		return "", fmt.Errorf("reading plugin %q: %w", pluginID, err)
	}
	if plugin == nil {
		return "", fmt.Errorf("plugin %q is not reported by any node: %w", pluginID, ErrNoController)
	}
	var usable []string
	var why []string
	for _, id := range slices.Sorted(maps.Keys(plugin.GetControllers())) {
		inst := plugin.GetControllers()[id]
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
		if len(why) == 0 {
			return "", fmt.Errorf("plugin %q has no controller instance: %w", pluginID, ErrNoController)
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

// controllerLoad counts, per controller node, the attachments in flight
// (attaching or detaching) whose last call it made.
func controllerLoad(st *fsm.StateSnapshot) (map[string]int, error) {
	load := map[string]int{}
	for _, state := range []pb.AttachmentState{pb.AttachmentState_ATTACHMENT_STATE_ATTACHING, pb.AttachmentState_ATTACHMENT_STATE_DETACHING} {
		atts, err := st.AttachmentsByState(nil, state)
		if err != nil {
			return nil, fmt.Errorf("reading %s attachments: %w", fsm.AttachmentStateWord(state), err)
		}
		for _, a := range atts {
			if c := a.GetControllerNodeId(); c != "" {
				load[c]++
			}
		}
	}
	return load, nil
}
