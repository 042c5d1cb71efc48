package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// allocAccess is the alloc side of ClientRPC: the client's alloc runners
// (the Client's own RestartAlloc and LogFiles).
type allocAccess interface {
	// LogFiles returns the paths of a task's stdout (stderr) files, oldest
	// first ("<log_dir>/<task>.stdout.N", see sdk/logrotate).
	LogFiles(allocID, task string, stderr bool) ([]string, error)
	// RestartAlloc restarts one task of an alloc, or every running task
	// for task "".
	RestartAlloc(allocID, task string) error
	// TaskDead reports whether a task of an alloc ("": its only or leader
	// task) is dead: it will not run again, and its executor has written
	// all its output to its log files.
	TaskDead(allocID, task string) (bool, error)
}

var (
	// ErrWrongNode is returned by ClientRPC calls whose request names
	// another node: the servers routed it to the wrong tunnel.
	ErrWrongNode = errcode.New(codes.FailedPrecondition, "request is for another node")
	// ErrBadLogRequest is returned by Logs for an origin or offset it
	// cannot read from.
	ErrBadLogRequest = errcode.New(codes.InvalidArgument, "invalid log request")
)

// clientRPC is what the node serves to the servers over its tunnel.
type clientRPC struct {
	pb.UnimplementedClientRPCServer
	nodeID string
	allocs allocAccess
	logs   logOptions
}

var _ pb.ClientRPCServer = (*clientRPC)(nil)

// checkNode refuses a request routed to this node for another.
func (r *clientRPC) checkNode(nodeID, allocID string) error {
	if nodeID != "" && nodeID != r.nodeID {
		return fmt.Errorf("alloc %s: request for node %s reached node %s: %w", allocID, nodeID, r.nodeID, ErrWrongNode)
	}
	return nil
}

// RestartAlloc restarts an alloc's task (or tasks) in place.
func (r *clientRPC) RestartAlloc(_ context.Context, req *pb.RestartAllocRequest) (*pb.RestartAllocResponse, error) {
	if err := r.checkNode(req.GetNodeId(), req.GetAllocId()); err != nil {
		return nil, errcode.Status(err)
	}
	if err := r.allocs.RestartAlloc(req.GetAllocId(), req.GetTask()); err != nil {
		return nil, errcode.Status(err)
	}
	return &pb.RestartAllocResponse{}, nil
}

// Logs streams a task's stdout or stderr (see logs.go).
func (r *clientRPC) Logs(req *pb.LogsRequest, stream grpc.ServerStreamingServer[pb.LogsFrame]) error {
	if err := r.checkNode(req.GetNodeId(), req.GetAllocId()); err != nil {
		return errcode.Status(err)
	}
	files := func() ([]string, error) { return r.allocs.LogFiles(req.GetAllocId(), req.GetTask(), req.GetStderr()) }
	rd, err := newLogReader(files, req.GetOrigin(), req.GetOffset(), r.logs)
	if err != nil {
		return errcode.Status(fmt.Errorf("logs of alloc %s task %q on node %s: %w", req.GetAllocId(), req.GetTask(), r.nodeID, err))
	}
	defer rd.close()
	// The header tells the servers the stream is open (their deadline for
	// opening it ends here); data may take a while when following.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	// A followed log ends once the task is dead and its log sent. An alloc
	// this client no longer runs (destroyed meanwhile) has no task left
	// to write either.
	dead := func() bool {
		d, err := r.allocs.TaskDead(req.GetAllocId(), req.GetTask())
		return d || err != nil
	}
	err = rd.run(stream.Context(), req.GetFollow(), dead, stream.Send)
	if err != nil {
		return errcode.Status(fmt.Errorf("logs of alloc %s task %q on node %s: %w", req.GetAllocId(), req.GetTask(), r.nodeID, err))
	}
	return nil
}

var _ allocAccess = (*Client)(nil)
