package pluginmanager

import (
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// ErrInvalidConfig is returned by New when the Config lacks its Send
// function: a manager that cannot tell the servers is a mistake of the
// caller's wiring.
var ErrInvalidConfig = errcode.New(codes.InvalidArgument, "invalid csi plugin manager config")
