package volumeloops

import (
	"context"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// ControllerCaller sends one CSI controller call to the controller
// instance of pluginID on node nodeID and fills resp. method is the CSI
// full method name ("/csi.v1.Controller/ControllerPublishVolume"). expect,
// when set, is the instance the call is for: a node whose instance of the
// plugin ID is another one now refuses it (csi.InstanceChanged) without
// calling a plugin. The
// error carries the plugin's gRPC code (errcode.Code finds it); a node that
// cannot be reached is Unavailable, so the call is classed uncertain and
// retried. clientproxy.CSIForwarder implements it.
type ControllerCaller interface {
	ControllerCall(ctx context.Context, nodeID, pluginID string, expect *pb.CSIControllerInstance, method string, req, resp proto.Message) error
}
