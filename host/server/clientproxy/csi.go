package clientproxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// CSIForwarder makes the servers' CSI controller calls: each goes to the
// plugin's controller instance on a client, over that client's tunnel
// (ClientCSI), from this server or from the server holding the tunnel
// (CSIRelay). The leader's reconcilers and the volume endpoints use it.
type CSIForwarder struct{ p *Proxy }

// NewCSIForwarder returns the CSI controller calls through p's tunnels.
func NewCSIForwarder(p *Proxy) *CSIForwarder { return &CSIForwarder{p: p} }

// csiForwardSlack is what a call through the tunnel may take beyond the
// CSI call's own deadline, so the node's answer (which names the plugin
// and the node) arrives before this server gives up.
const csiForwardSlack = 2 * time.Second

// ControllerCall sends one CSI controller call (method: the CSI full
// method name, one of csi.ForwardedMethods) to pluginID's controller
// instance on node nodeID (expect: the instance it is for: a node whose
// instance of the plugin ID is another one refuses the call) and fills
// resp. The error keeps the plugin's gRPC code (errcode.Code,
// status.Code); a node that cannot be reached is
// Unavailable, so callers class it uncertain. The call is retried only
// while no server holds the node's tunnel (nothing was sent); any other
// failure is the caller's to retry, by its class. req may hold secrets:
// it is never logged here.
func (f *CSIForwarder) ControllerCall(ctx context.Context, nodeID, pluginID string, expect *pb.CSIControllerInstance, method string, req, resp proto.Message) error {
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
		ctx, cancel = context.WithTimeout(ctx, m.Call.Deadline()+csiForwardSlack)
		defer cancel()
	}
	creq := &pb.CSIControllerCallRequest{NodeId: nodeID, PluginId: pluginID, Method: method, Request: b, Expect: expect}
	cresp, err := untilConnected(ctx, f.p, func(retry bool) (*pb.CSIControllerCallResponse, error) {
		return f.once(ctx, creq, retry)
	})
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

// once makes one attempt of a controller call (onNode).
func (f *CSIForwarder) once(ctx context.Context, req *pb.CSIControllerCallRequest, retry bool) (*pb.CSIControllerCallResponse, error) {
	return onNode(ctx, f.p, req.GetNodeId(), retry,
		func(c pb.ClientCSIClient) (*pb.CSIControllerCallResponse, error) { return c.ControllerCall(ctx, req) },
		func(fctx context.Context, c pb.CSIRelayClient) (*pb.CSIControllerCallResponse, error) {
			return c.ControllerCall(fctx, req)
		})
}

// onNode makes one attempt of a ClientCSI call on node nodeID: direct over
// this server's tunnel of the node, or relay through the server holding
// it (whose CSIRelay answers from its own tunnels only). retry tells Find
// to look for the node afresh.
func onNode[Resp any](ctx context.Context, p *Proxy, nodeID string, retry bool,
	direct func(pb.ClientCSIClient) (Resp, error), relay func(context.Context, pb.CSIRelayClient) (Resp, error)) (Resp, error) {
	var none Resp
	r, err := p.Find(ctx, nodeID, retry)
	if err != nil {
		return none, err
	}
	if r.Session != nil {
		resp, err := direct(pb.NewClientCSIClient(r.Session.Conn()))
		if err != nil {
			return none, errcode.Status(err)
		}
		return resp, nil
	}
	conn, err := p.cfg.Pool.Conn(r.Server.GetRpcAddr())
	if err != nil {
		return none, viaServer(r.Server, nodeID, err)
	}
	resp, err := relay(p.forwardContext(ctx), pb.NewCSIRelayClient(conn))
	if err != nil {
		return none, viaServer(r.Server, nodeID, err)
	}
	return resp, nil
}

// untilConnected makes attempts of once while no server holds the node's
// tunnel (ErrNodeNotConnected) and ctx and the proxy's attempts last,
// waiting the proxy's retry wait between them; it returns the last
// attempt's answer.
func untilConnected[Resp any](ctx context.Context, p *Proxy, once func(retry bool) (Resp, error)) (resp Resp, err error) {
	for attempt := range p.attempts(ctx) {
		if attempt > 0 && !sleep(ctx, p.retryWait(attempt)) {
			break
		}
		resp, err = once(attempt > 0)
		if !errors.Is(err, ErrNodeNotConnected) {
			break
		}
	}
	return resp, err
}

// CSIRelay is the CSIRelay service: another server's forwarded call,
// made over this server's own tunnel of the node.
type CSIRelay struct {
	pb.UnimplementedCSIRelayServer
	f *CSIForwarder
}

// NewCSIRelay returns the CSIRelay service over f.
func NewCSIRelay(f *CSIForwarder) *CSIRelay { return &CSIRelay{f: f} }

// ControllerCall makes another server's forwarded call over this server's
// tunnel of the node.
func (r *CSIRelay) ControllerCall(ctx context.Context, req *pb.CSIControllerCallRequest) (*pb.CSIControllerCallResponse, error) {
	if !rpc.Forwarded(ctx) {
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
