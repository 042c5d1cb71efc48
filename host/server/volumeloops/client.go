package volumeloops

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// forwardConn is a grpc.ClientConnInterface whose unary calls are CSI
// controller calls on one plugin's controller instance on one node, so
// csi's typed client (deadlines, error classes, NotFound-is-done on
// deletes, the ValidateVolumeCapabilities checks) runs on the servers
// over the forwarder.
type forwardConn struct {
	call             func(ctx context.Context, nodeID, pluginID string, expect *pb.CSIControllerInstance, method string, req, resp proto.Message) error
	nodeID, pluginID string
	expect           *pb.CSIControllerInstance
}

var _ grpc.ClientConnInterface = forwardConn{}

func (c forwardConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	req, ok1 := args.(proto.Message)
	resp, ok2 := reply.(proto.Message)
	if !ok1 || !ok2 {
		return status.Errorf(codes.Internal, "csi %s: request or response is not a proto message", method)
	}
	// A status error, so the csi client classes it by its code (a
	// NotConnectedError is Unavailable: uncertain, not Unknown).
	if err := c.call(ctx, c.nodeID, c.pluginID, c.expect, method, req, resp); err != nil {
		return errcode.Status(err)
	}
	return nil
}

func (c forwardConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "csi calls through a node are unary")
}

// ClientVia is a CSI client of pluginID's controller instance on nodeID,
// through calls; with expect set, only of that instance (a node serving
// the ID with another one refuses: csi.InstanceChanged). logger is the
// server's. Its calls are left out of the CSI call metrics: the node that
// makes them observes them.
func ClientVia(calls ControllerCaller, logger hclog.Logger, nodeID, pluginID string, expect *pb.CSIControllerInstance) *csi.Client {
	return csi.New(forwardConn{call: calls.ControllerCall, nodeID: nodeID, pluginID: pluginID, expect: expect},
		csi.WithLogger(logger.Named("csi").With("plugin_id", pluginID, "node_id", nodeID)), csi.WithoutCallMetrics())
}
