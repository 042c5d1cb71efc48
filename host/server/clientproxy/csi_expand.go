package clientproxy

import (
	"context"
	"errors"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// NodeExpand has node nodeID expand volume volumeID with its node plugin
// pluginID (ClientCSI NodeExpandVolume), over the node's tunnel from this
// server or through the server holding it. req is the CSI call as the
// servers build it; the node fills in its paths. It answers the plugin's
// response and the path the node gave it. Errors keep the node's code; a
// node that cannot be reached is Unavailable. The call is retried only
// while no server holds the node's tunnel. req may hold secrets: never
// logged here.
func (f *CSIForwarder) NodeExpand(ctx context.Context, nodeID, pluginID, volumeID string, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, string, error) {
	ctx = metadata.NewIncomingContext(ctx, metadata.MD{})
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, "", fmt.Errorf("node expansion of volume %q on node %s: encoding the request: %w", volumeID, nodeID, errcode.Fallback(errForwardEncode, err))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, csi.DefaultTimeouts()[csi.CallNodeExpandVolume]+csiForwardSlack)
		defer cancel()
	}
	nreq := &pb.CSINodeExpandRequest{NodeId: nodeID, PluginId: pluginID, VolumeId: volumeID, Request: b}
	p := f.p
	var nresp *pb.CSINodeExpandResponse
	for attempt := range p.attempts(ctx) {
		if attempt > 0 && !sleep(ctx, p.retryWait(attempt)) {
			break
		}
		nresp, err = f.expandOnce(ctx, nreq, attempt > 0)
		if !errors.Is(err, ErrNodeNotConnected) {
			break
		}
	}
	if err != nil {
		if ctx.Err() != nil && errcode.Code(err) != codes.DeadlineExceeded && errcode.Code(err) != codes.Canceled {
			return nil, "", fmt.Errorf("node expansion of volume %q on node %s: %w (last attempt: %v)", volumeID, nodeID, ctx.Err(), err)
		}
		return nil, "", err
	}
	resp := &csipb.NodeExpandVolumeResponse{}
	if err := proto.Unmarshal(nresp.GetResponse(), resp); err != nil {
		return nil, "", fmt.Errorf("node expansion of volume %q on node %s: %w: %v", volumeID, nodeID, errForwardDecode, err)
	}
	return resp, nresp.GetVolumePath(), nil
}

// expandOnce makes one attempt of NodeExpand, as once does for
// controller calls.
func (f *CSIForwarder) expandOnce(ctx context.Context, req *pb.CSINodeExpandRequest, retry bool) (*pb.CSINodeExpandResponse, error) {
	p := f.p
	r, err := p.Find(ctx, req.GetNodeId(), retry)
	if err != nil {
		return nil, err
	}
	if r.Session != nil {
		resp, err := pb.NewClientCSIClient(r.Session.Conn()).NodeExpandVolume(ctx, req)
		if err != nil {
			return nil, errcode.Status(err)
		}
		return resp, nil
	}
	conn, err := p.cfg.Pool.Conn(r.Server.GetRpcAddr())
	if err != nil {
		return nil, viaServer(r.Server, req.GetNodeId(), err)
	}
	resp, err := pb.NewCSIRelayClient(conn).NodeExpandVolume(p.forwardContext(ctx), req)
	if err != nil {
		return nil, viaServer(r.Server, req.GetNodeId(), err)
	}
	return resp, nil
}

// NodeExpandVolume makes another server's forwarded node expansion over
// this server's tunnel of the node.
func (r *CSIRelay) NodeExpandVolume(ctx context.Context, req *pb.CSINodeExpandRequest) (*pb.CSINodeExpandResponse, error) {
	if !rpc.Forwarded(ctx) {
		return nil, status.Error(codes.PermissionDenied, "CSIRelay is called by servers forwarding a call, marked as forwarded")
	}
	resp, err := r.f.expandOnce(ctx, req, false)
	if err != nil {
		return nil, errcode.Status(err)
	}
	return resp, nil
}
