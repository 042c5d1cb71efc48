package sdk

import (
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"berth.dev/berth/sdk/driverpb"
)

// GRPCServer is the go-plugin server factory every plugin process serves
// with (ServeDriver and ServeStorageAdapter use it; a plugin calling
// plugin.Serve itself should too): go-plugin's default server, with both
// message limits at driverpb.MaxMessageSize, the limit berth sends within.
// gRPC's default would refuse any request over 4 MiB, such as a task whose
// job the servers accepted.
func GRPCServer(opts []grpc.ServerOption) *grpc.Server {
	return plugin.DefaultGRPCServer(append(opts,
		grpc.MaxRecvMsgSize(driverpb.MaxMessageSize), grpc.MaxSendMsgSize(driverpb.MaxMessageSize)))
}

// dialOptions are berth's side of the same limits, for its connections to
// plugins.
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(driverpb.MaxMessageSize), grpc.MaxCallSendMsgSize(driverpb.MaxMessageSize))}
}
