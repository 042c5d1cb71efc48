package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/pluginmanager"
	"berth.dev/berth/host/client/hostvolumes"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// controllers finds the node's controller instance of a CSI plugin
// (*pluginmanager.Manager).
type controllers interface {
	ControllerOf(pluginID string, expect *pb.CSIControllerInstance) (*csi.Client, error)
}

// ErrNoCSIPlugins is returned by ClientCSI calls on a client that manages
// no CSI plugins.
var ErrNoCSIPlugins = errcode.New(codes.FailedPrecondition, "this node runs no csi plugins")

// ErrNoControllerHere is returned by ClientCSI calls for a plugin this
// node runs no controller instance of (any more: the servers' plugin row
// lags the node's report, as when a drain just stopped it). Unavailable,
// never NotFound: the servers take NotFound from an unpublish or a delete
// for the plugin's "nothing to undo", and a call that reached no plugin
// undid nothing; Unavailable has them try again, through another
// controller if there is one.
var ErrNoControllerHere = errcode.New(codes.Unavailable, "no controller instance of the csi plugin on this node")

// ErrBadCSICall is returned by ClientCSI calls whose request bytes do not
// decode as the method's CSI request.
var ErrBadCSICall = errcode.New(codes.InvalidArgument, "malformed forwarded csi call")

// clientCSI serves the servers' CSI controller calls over the node's
// tunnel: one allow-listed Controller RPC on the plugin's controller
// instance here, its status code passed back as the plugin gave it. The
// request may hold secrets: it is never logged here (csi.Client.Invoke
// logs it redacted at trace level).
type clientCSI struct {
	pb.UnimplementedClientCSIServer
	nodeID string
	// plugins returns the node's plugin manager, nil while it has none
	// (not started yet, or a client without CSI plugins).
	plugins func() controllers
	// detach takes a volume off the node (NodeDetachVolume), nil on a
	// client without volume hooks.
	detach volumeDetacher
	// expander returns the node's volume manager, nil while it has none
	// (csi_expand.go).
	expander func() nodeExpander
	// hostVolumes makes and removes the node's dynamic host volumes
	// (host_volumes.go), nil on a client without.
	hostVolumes *hostvolumes.Manager
}

var _ pb.ClientCSIServer = (*clientCSI)(nil)

func (r *clientCSI) ControllerCall(ctx context.Context, req *pb.CSIControllerCallRequest) (*pb.CSIControllerCallResponse, error) {
	plugin := req.GetPluginId()
	fail := func(err error) error {
		return errcode.Status(fmt.Errorf("csi plugin %q on node %s: %w", plugin, r.nodeID, err))
	}
	if req.GetNodeId() != "" && req.GetNodeId() != r.nodeID {
		return nil, fail(fmt.Errorf("call for node %s reached node %s: %w", req.GetNodeId(), r.nodeID, ErrWrongNode))
	}
	m, ok := csi.ForwardedMethodOf(req.GetMethod())
	if !ok {
		return nil, fail(fmt.Errorf("method %q: %w", req.GetMethod(), csi.ErrNotForwardable))
	}
	in := m.NewRequest()
	if err := proto.Unmarshal(req.GetRequest(), in); err != nil {
		return nil, fail(fmt.Errorf("%w: %s request: %v", ErrBadCSICall, m.Call, err))
	}
	pm := r.plugins()
	if pm == nil {
		return nil, fail(ErrNoCSIPlugins)
	}
	c, err := pm.ControllerOf(plugin, req.GetExpect())
	if errors.Is(err, pluginmanager.ErrNoController) {
		return nil, fail(ErrNoControllerHere)
	}
	if errors.Is(err, csi.ErrControllerInstanceChanged) {
		// Marked on the wire, so the servers tell it from a plugin's own
		// FailedPrecondition: the call went to no plugin.
		return nil, csi.InstanceChangedStatus(fmt.Errorf("csi plugin %q on node %s: %w", plugin, r.nodeID, err))
	}
	if err != nil {
		return nil, fail(err)
	}
	out := m.NewResponse()
	if err := c.Invoke(ctx, req.GetMethod(), in, out); err != nil {
		// The plugin's own code, its message (less the request's secrets)
		// prefixed with where it ran.
		st := status.Convert(err)
		return nil, status.Errorf(st.Code(), "csi plugin %q on node %s: %s", plugin, r.nodeID, st.Message())
	}
	b, err := proto.Marshal(out)
	if err != nil {
		return nil, fail(err)
	}
	return &pb.CSIControllerCallResponse{Response: b}, nil
}

// csiControllers is what ClientCSI calls: the plugin manager, set before
// the tunnel starts (nil for a client without CSI plugins).
func (c *Client) csiControllers() controllers {
	if c.plugins == nil {
		return nil
	}
	return c.plugins
}
