package clientproxy

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// HostVolumeCallTimeout bounds a dynamic host volume's plugin call on its
// node whose caller set no deadline: a plugin may format a disk.
const HostVolumeCallTimeout = 5*time.Minute + csiForwardSlack

// HostVolumeOnNode has node nodeID run dynamic host volume v's plugin
// (ClientCSI HostVolumeCreate, or HostVolumeDelete when !create), over its
// tunnel from this server or through the server holding it. Plugins are
// idempotent (the contract), so the call is retried while no server holds
// the node's tunnel. Errors keep the node's code; the node's own message
// names the volume, the node and the plugin.
func (f *CSIForwarder) HostVolumeOnNode(ctx context.Context, create bool, nodeID string, v *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
	ctx = metadata.NewIncomingContext(ctx, metadata.MD{})
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, HostVolumeCallTimeout)
		defer cancel()
	}
	req := &pb.HostVolumeOnNodeRequest{NodeId: nodeID, Volume: v}
	resp, err := untilConnected(ctx, f.p, func(retry bool) (*pb.HostVolumeOnNodeResponse, error) {
		return f.hostVolumeOnce(ctx, create, req, retry)
	})
	if err != nil {
		op := "deleting"
		if create {
			op = "creating"
		}
		if ctx.Err() != nil && errcode.Code(err) != codes.DeadlineExceeded && errcode.Code(err) != codes.Canceled {
			return nil, fmt.Errorf("%s host volume %q (%s) on node %s: %w (last attempt: %v)", op, v.GetName(), v.GetId(), nodeID, ctx.Err(), err)
		}
		return nil, err
	}
	return resp, nil
}

func (f *CSIForwarder) hostVolumeOnce(ctx context.Context, create bool, req *pb.HostVolumeOnNodeRequest, retry bool) (*pb.HostVolumeOnNodeResponse, error) {
	return onNode(ctx, f.p, req.GetNodeId(), retry,
		func(c pb.ClientCSIClient) (*pb.HostVolumeOnNodeResponse, error) {
			if create {
				return c.HostVolumeCreate(ctx, req)
			}
			return c.HostVolumeDelete(ctx, req)
		},
		func(fctx context.Context, c pb.CSIRelayClient) (*pb.HostVolumeOnNodeResponse, error) {
			if create {
				return c.HostVolumeCreate(fctx, req)
			}
			return c.HostVolumeDelete(fctx, req)
		})
}

// HostVolumeCreate makes another server's forwarded host volume create
// over this server's tunnel of the node.
func (r *CSIRelay) HostVolumeCreate(ctx context.Context, req *pb.HostVolumeOnNodeRequest) (*pb.HostVolumeOnNodeResponse, error) {
	return r.hostVolume(ctx, true, req)
}

// HostVolumeDelete makes another server's forwarded host volume delete
// over this server's tunnel of the node.
func (r *CSIRelay) HostVolumeDelete(ctx context.Context, req *pb.HostVolumeOnNodeRequest) (*pb.HostVolumeOnNodeResponse, error) {
	return r.hostVolume(ctx, false, req)
}

func (r *CSIRelay) hostVolume(ctx context.Context, create bool, req *pb.HostVolumeOnNodeRequest) (*pb.HostVolumeOnNodeResponse, error) {
	if !rpc.Forwarded(ctx) {
		return nil, status.Error(codes.PermissionDenied, "CSIRelay is called by servers forwarding a call, marked as forwarded")
	}
	resp, err := r.f.hostVolumeOnce(ctx, create, req, false)
	if err != nil {
		return nil, errcode.Status(err)
	}
	return resp, nil
}
