package volumemanager

import (
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

var (
	// ErrInvalidRequest is returned by Publish and Unpublish for a request
	// that names no volume, plugin or user, or names them with characters a
	// path cannot hold ('/', "..").
	ErrInvalidRequest = errcode.New(codes.InvalidArgument, "invalid volume publish request")
	// ErrTearingDown is returned by Publish when the user's use of the
	// volume is being unpublished: a use is never published again once its
	// teardown started.
	ErrTearingDown = errcode.New(codes.FailedPrecondition, "volume is being unpublished for this user")
	// ErrPluginMismatch is returned by Publish when the node holds the
	// volume through another plugin than the request names.
	ErrPluginMismatch = errcode.New(codes.FailedPrecondition, "volume is staged on this node by another plugin")
	// ErrInvalidConfig is returned by New for a config without a data dir,
	// a store or plugins.
	ErrInvalidConfig = errcode.New(codes.InvalidArgument, "invalid volume manager config")
	// ErrNotHeld is returned by Expand for a volume the node holds
	// neither staged nor published (or holds through another plugin).
	ErrNotHeld = errcode.New(codes.FailedPrecondition, "volume is neither staged nor published on this node")
	// ErrNoNodeExpand is returned by Expand when the volume's node plugin
	// lacks the EXPAND_VOLUME node capability.
	ErrNoNodeExpand = errcode.New(codes.FailedPrecondition, "node plugin cannot expand volumes (no EXPAND_VOLUME node capability)")
)
