package pluginmanager

import (
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// ErrInvalidConfig is returned by New when the Config lacks its Send
// function: a manager that cannot tell the servers is a mistake of the
// caller's wiring.
var ErrInvalidConfig = errcode.New(codes.InvalidArgument, "invalid csi plugin manager config")

// ErrNoController is returned by Controller when no instance on this node
// serves the plugin's controller service.
var ErrNoController = errcode.New(codes.NotFound, "no controller instance of the csi plugin on this node")

// ErrControllerUnhealthy is returned by Controller when the node's
// controller instance of the plugin is not healthy (or not connected yet).
var ErrControllerUnhealthy = errcode.New(codes.FailedPrecondition, "the csi plugin's controller instance on this node is not healthy")

// ErrNoNode is returned by Node (and WaitNode, when its context ends) when
// no instance on this node serves the plugin's node service.
var ErrNoNode = errcode.New(codes.NotFound, "no node instance of the csi plugin on this node")

// ErrNodeUnhealthy is returned by Node when the node's node instance of
// the plugin is not healthy (or not connected yet).
var ErrNodeUnhealthy = errcode.New(codes.FailedPrecondition, "the csi plugin's node instance on this node is not healthy")
