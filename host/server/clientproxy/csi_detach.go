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

// NodeDetachTimeout bounds a NodeDetachVolume whose caller set no
// deadline: a teardown try on the node is bounded by 2 minutes
// (volumehooks.DefaultTeardownAttempt), its answer needs a little more.
const NodeDetachTimeout = 2*time.Minute + csiForwardSlack

// NodeDetachVolume asks node nodeID to take volumeID off (ClientCSI), over
// its tunnel from this server or through the server holding it. Tearing
// down is idempotent on the node, so an attempt that did not reach it or
// got no answer (the unreachable class: Unavailable, DeadlineExceeded) is
// tried again while ctx lasts, after finding the node again; the node's
// own refusals are returned as they are, with their codes.
func (f *CSIForwarder) NodeDetachVolume(ctx context.Context, nodeID, volumeID string) (*pb.CSINodeDetachResponse, error) {
	// As ControllerCall: the call is this server's own.
	ctx = metadata.NewIncomingContext(ctx, metadata.MD{})
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, NodeDetachTimeout)
		defer cancel()
	}
	p := f.p
	req := &pb.CSINodeDetachRequest{NodeId: nodeID, VolumeId: volumeID}
	var (
		resp *pb.CSINodeDetachResponse
		err  error
	)
	for attempt := range p.attempts(ctx) {
		if attempt > 0 && !sleep(ctx, p.retryWait(attempt)) {
			break
		}
		resp, err = f.detachOnce(ctx, req, attempt > 0)
		if err == nil || !retryable(ctx, err) {
			break
		}
		p.logger.Debug("node detach of a volume failed; retrying", "volume_id", volumeID, "node_id", nodeID, "attempt", attempt+1, "error", err)
	}
	if err != nil {
		if ctx.Err() != nil && errcode.Code(err) != codes.DeadlineExceeded && errcode.Code(err) != codes.Canceled {
			return nil, fmt.Errorf("detaching volume %q from node %s: %w (last attempt: %v)", volumeID, nodeID, ctx.Err(), err)
		}
		return nil, err
	}
	return resp, nil
}

func (f *CSIForwarder) detachOnce(ctx context.Context, req *pb.CSINodeDetachRequest, retry bool) (*pb.CSINodeDetachResponse, error) {
	r, err := f.p.Find(ctx, req.GetNodeId(), retry)
	if err != nil {
		return nil, err
	}
	if r.Session != nil {
		resp, err := pb.NewClientCSIClient(r.Session.Conn()).NodeDetachVolume(ctx, req)
		if err != nil {
			return nil, errcode.Status(err)
		}
		return resp, nil
	}
	conn, err := f.p.cfg.Pool.Conn(r.Server.GetRpcAddr())
	if err != nil {
		return nil, viaServer(r.Server, req.GetNodeId(), err)
	}
	resp, err := pb.NewCSIRelayClient(conn).NodeDetachVolume(f.p.forwardContext(ctx), req)
	if err != nil {
		return nil, viaServer(r.Server, req.GetNodeId(), err)
	}
	return resp, nil
}

// NodeDetachVolume makes another server's forwarded node detach over this
// server's tunnel of the node.
func (r *CSIRelay) NodeDetachVolume(ctx context.Context, req *pb.CSINodeDetachRequest) (*pb.CSINodeDetachResponse, error) {
	if !rpc.Forwarded(ctx) {
		return nil, status.Error(codes.PermissionDenied, "CSIRelay is called by servers forwarding a call, marked as forwarded")
	}
	resp, err := r.f.detachOnce(ctx, req, false)
	if err != nil {
		return nil, errcode.Status(err)
	}
	return resp, nil
}
