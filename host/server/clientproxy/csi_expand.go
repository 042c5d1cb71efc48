package clientproxy

import (
	"context"
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
		ctx, cancel = context.WithTimeout(ctx, csi.CallNodeExpandVolume.Deadline()+csiForwardSlack)
		defer cancel()
	}
	nreq := &pb.CSINodeExpandRequest{NodeId: nodeID, PluginId: pluginID, VolumeId: volumeID, Request: b}
	nresp, err := untilConnected(ctx, f.p, func(retry bool) (*pb.CSINodeExpandResponse, error) {
		return f.expandOnce(ctx, nreq, retry)
	})
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

// expandOnce makes one attempt of NodeExpand (onNode).
func (f *CSIForwarder) expandOnce(ctx context.Context, req *pb.CSINodeExpandRequest, retry bool) (*pb.CSINodeExpandResponse, error) {
	return onNode(ctx, f.p, req.GetNodeId(), retry,
		func(c pb.ClientCSIClient) (*pb.CSINodeExpandResponse, error) { return c.NodeExpandVolume(ctx, req) },
		func(fctx context.Context, c pb.CSIRelayClient) (*pb.CSINodeExpandResponse, error) {
			return c.NodeExpandVolume(fctx, req)
		})
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
