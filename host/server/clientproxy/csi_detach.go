package clientproxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// NodeDetachVolume asks node nodeID to take volumeID off for users
// (ClientCSI), over its tunnel from this server or through the server
// holding it. Tearing down is idempotent on the node, so an attempt that
// did not reach it (Unavailable) or got no answer before this call's own
// deadline is tried again while ctx lasts, after finding the node again.
// An answer of the node's — a refusal, or DeadlineExceeded when its
// teardown outlasted the call — is not tried again and is returned with
// its code and the node's own message (which names the volume, the node
// and the alloc), not wrapped; this server's own failures are wrapped
// naming the volume and the node.
func (f *CSIForwarder) NodeDetachVolume(ctx context.Context, nodeID, volumeID string, users []*pb.CSINodeDetachUser) (*pb.CSINodeDetachResponse, error) {
	// As ControllerCall: the call is this server's own.
	ctx = metadata.NewIncomingContext(ctx, metadata.MD{})
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, NodeDetachTimeout)
		defer cancel()
	}
	p := f.p
	req := &pb.CSINodeDetachRequest{NodeId: nodeID, VolumeId: volumeID, Users: users}
	var (
		resp *pb.CSINodeDetachResponse
		err  error
	)
	for attempt := range p.attempts(ctx) {
		if attempt > 0 && !sleep(ctx, p.retryWait(attempt)) {
			break
		}
		resp, err = f.detachOnce(ctx, req, attempt > 0)
		var answer *nodeAnswer
		if err == nil || errors.As(err, &answer) || ctx.Err() != nil || errcode.Code(err) != codes.Unavailable {
			break
		}
		p.logger.Debug("node detach of a volume failed; retrying", "volume_id", volumeID, "node_id", nodeID, "attempt", attempt+1, "error", err)
	}
	var answer *nodeAnswer
	switch {
	case err == nil:
		return resp, nil
	case errors.As(err, &answer):
		return nil, answer
	case ctx.Err() != nil && errcode.Code(err) != codes.DeadlineExceeded && errcode.Code(err) != codes.Canceled:
		return nil, fmt.Errorf("detaching volume %q from node %s: %w (last attempt: %v)", volumeID, nodeID, ctx.Err(), err)
	}
	return nil, fmt.Errorf("detaching volume %q from node %s: %w", volumeID, nodeID, err)
}

// nodeAnswer is a node's own answer to a call (its refusal, or its
// DeadlineExceeded): the status with the node's message, which already
// names what it is about. It is not tried again.
type nodeAnswer struct{ st *status.Status }

func (e *nodeAnswer) Error() string { return e.st.Message() }

// GRPCStatus keeps the node's code (and details).
func (e *nodeAnswer) GRPCStatus() *status.Status { return e.st }

// statusError is a gRPC status error that reads as its message alone (no
// "rpc error: code = … desc =" before it), its code kept: what users see
// when it is wrapped.
type statusError struct{ st *status.Status }

func (e *statusError) Error() string { return e.st.Message() }

// GRPCStatus keeps the code (and details).
func (e *statusError) GRPCStatus() *status.Status { return e.st }

// answered tells the node's answer from a call that got none: a status
// error that came back while ctx lasts and is not Unavailable (no answer
// reached us) was answered, by the node or by the server relaying to it.
// The tunnel's "node <id>: " before a message that names the node already
// is dropped.
func answered(ctx context.Context, nodeID string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if ctx.Err() != nil || st.Code() == codes.Unavailable || st.Code() == codes.Canceled {
		return &statusError{st: st}
	}
	if rest, ok := strings.CutPrefix(st.Message(), "node "+nodeID+": "); ok && strings.Contains(rest, nodeID) {
		p := st.Proto()
		p.Message = rest
		st = status.FromProto(p)
	}
	return &nodeAnswer{st: st}
}

func (f *CSIForwarder) detachOnce(ctx context.Context, req *pb.CSINodeDetachRequest, retry bool) (*pb.CSINodeDetachResponse, error) {
	r, err := f.p.Find(ctx, req.GetNodeId(), retry)
	if err != nil {
		return nil, err
	}
	if r.Session != nil {
		resp, err := pb.NewClientCSIClient(r.Session.Conn()).NodeDetachVolume(ctx, req)
		if err != nil {
			return nil, answered(ctx, req.GetNodeId(), errcode.Status(err))
		}
		return resp, nil
	}
	conn, err := f.p.cfg.Pool.Conn(r.Server.GetRpcAddr())
	if err != nil {
		return nil, viaServer(r.Server, req.GetNodeId(), err)
	}
	resp, err := pb.NewCSIRelayClient(conn).NodeDetachVolume(f.p.forwardContext(ctx), req)
	if err != nil {
		a := answered(ctx, req.GetNodeId(), err)
		var answer *nodeAnswer
		if errors.As(a, &answer) {
			return nil, a
		}
		return nil, viaServer(r.Server, req.GetNodeId(), a)
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
