package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// csiForwarder makes the servers' CSI controller calls: each goes to the
// plugin's controller instance on a client, over that client's tunnel
// (ClientCSI), from this server or from the server holding the tunnel
// (CSIRelay). The leader's reconcilers and the volume endpoints use it.
type csiForwarder struct{ s *Server }

func newCSIForwarder(s *Server) *csiForwarder { return &csiForwarder{s: s} }

// csiForwardSlack is what a call through the tunnel may take beyond the
// CSI call's own deadline, so the node's answer (which names the plugin
// and the node) arrives before this server gives up.
const csiForwardSlack = 2 * time.Second

// ControllerCall sends one CSI controller call (method: the CSI full
// method name, one of csi.ForwardedMethods) to pluginID's controller
// instance on node nodeID (expect: the instance it is for, see
// controllerCaller) and fills resp. The error keeps the plugin's
// gRPC code (errcode.Code, status.Code); a node that cannot be reached is
// Unavailable, so callers class it uncertain. The call is retried only
// while no server holds the node's tunnel (nothing was sent); any other
// failure is the caller's to retry, by its class. req may hold secrets:
// it is never logged here.
func (f *csiForwarder) ControllerCall(ctx context.Context, nodeID, pluginID string, expect *pb.CSIControllerInstance, method string, req, resp proto.Message) error {
	// The call is this server's own, whatever request it serves: a volume
	// endpoint forwarded here from a follower carries the forwarded mark
	// in its incoming metadata, and the one-hop rule would then keep the
	// call from reaching a node whose tunnel another server holds.
	ctx = metadata.NewIncomingContext(ctx, metadata.MD{})
	m, ok := csi.ForwardedMethodOf(method)
	if !ok {
		return fmt.Errorf("csi plugin %q on node %s: method %q: %w", pluginID, nodeID, method, csi.ErrNotForwardable)
	}
	b, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("csi %s for plugin %q on node %s: encoding the request: %w", m.Call, pluginID, nodeID, errcode.Fallback(errForwardEncode, err))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, csi.DefaultTimeouts()[m.Call]+csiForwardSlack)
		defer cancel()
	}
	creq := &pb.CSIControllerCallRequest{NodeId: nodeID, PluginId: pluginID, Method: method, Request: b, Expect: expect}
	p := f.s.proxy
	var cresp *pb.CSIControllerCallResponse
	for attempt := range p.attempts(ctx) {
		if attempt > 0 && !sleep(ctx, p.backoff<<(attempt-1)) {
			break
		}
		cresp, err = f.once(ctx, creq, attempt > 0)
		if !errors.Is(err, ErrNodeNotConnected) {
			break
		}
	}
	if err != nil {
		if ctx.Err() != nil && errcode.Code(err) != codes.DeadlineExceeded && errcode.Code(err) != codes.Canceled {
			return fmt.Errorf("csi %s for plugin %q on node %s: %w (last attempt: %v)", m.Call, pluginID, nodeID, ctx.Err(), err)
		}
		return err
	}
	if err := proto.Unmarshal(cresp.GetResponse(), resp); err != nil {
		return fmt.Errorf("csi %s for plugin %q on node %s: %w: %v", m.Call, pluginID, nodeID, errForwardDecode, err)
	}
	return nil
}

var (
	// errForwardEncode is returned when a CSI request cannot be encoded:
	// the caller built an invalid message (berth's bug).
	errForwardEncode = errcode.New(codes.Internal, "csi request does not encode")
	// errForwardDecode is returned when a node's answer does not decode
	// as the method's response: a node of another version, or corruption.
	errForwardDecode = errcode.New(codes.Internal, "csi response from the node does not decode")
)

// once makes one attempt: over this server's tunnel of the node, or
// through the server holding it (which answers from its own tunnels only).
func (f *csiForwarder) once(ctx context.Context, req *pb.CSIControllerCallRequest, retry bool) (*pb.CSIControllerCallResponse, error) {
	p := f.s.proxy
	r, err := p.find(ctx, req.GetNodeId(), retry)
	if err != nil {
		return nil, err
	}
	if r.session != nil {
		resp, err := pb.NewClientCSIClient(r.session.Conn()).ControllerCall(ctx, req)
		if err != nil {
			return nil, errcode.Status(err)
		}
		return resp, nil
	}
	conn, err := f.s.pool.Conn(r.server.GetRpcAddr())
	if err != nil {
		return nil, viaServer(r.server, req.GetNodeId(), err)
	}
	resp, err := pb.NewCSIRelayClient(conn).ControllerCall(p.forwardContext(ctx), req)
	if err != nil {
		return nil, viaServer(r.server, req.GetNodeId(), err)
	}
	return resp, nil
}

// csiRelay is the CSIRelay service: another server's forwarded call,
// made over this server's own tunnel of the node.
type csiRelay struct {
	pb.UnimplementedCSIRelayServer
	f *csiForwarder
}

func (r *csiRelay) ControllerCall(ctx context.Context, req *pb.CSIControllerCallRequest) (*pb.CSIControllerCallResponse, error) {
	if !forwarded(ctx) {
		// Only servers call it, always marked; an unmarked call would be
		// forwarded on, which the one-hop rule forbids.
		return nil, status.Error(codes.PermissionDenied, "CSIRelay is called by servers forwarding a call, marked as forwarded")
	}
	if _, ok := csi.ForwardedMethodOf(req.GetMethod()); !ok {
		return nil, errcode.Status(fmt.Errorf("csi plugin %q on node %s: method %q: %w", req.GetPluginId(), req.GetNodeId(), req.GetMethod(), csi.ErrNotForwardable))
	}
	resp, err := r.f.once(ctx, req, false)
	if err != nil {
		return nil, errcode.Status(err)
	}
	return resp, nil
}

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

// csiClientVia is a CSI client of pluginID's controller instance on
// nodeID, through calls; with expect set, only of that instance (a node
// serving the ID with another one refuses: csi.InstanceChanged).
func (s *Server) csiClientVia(calls controllerCaller, nodeID, pluginID string, expect *pb.CSIControllerInstance) *csi.Client {
	return csi.New(forwardConn{call: calls.ControllerCall, nodeID: nodeID, pluginID: pluginID, expect: expect},
		csi.WithLogger(s.logger.Named("csi").With("plugin_id", pluginID, "node_id", nodeID)))
}
