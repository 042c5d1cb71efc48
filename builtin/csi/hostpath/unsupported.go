//go:build !linux

package hostpath

import (
	"context"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// ErrUnsupportedPlatform is returned by Run and Start on systems other than
// Linux: the plugin is built on bind mounts and loop devices.
var ErrUnsupportedPlatform = errcode.New(codes.Unimplemented, "the hostpath CSI plugin runs on Linux only")

// Server is a running hostpath plugin; on this platform none ever runs.
type Server struct{}

// Run reports ErrUnsupportedPlatform.
func Run(ctx context.Context, cfg Config) error { return ErrUnsupportedPlatform }

// Start reports ErrUnsupportedPlatform.
func Start(ctx context.Context, cfg Config) (*Server, error) { return nil, ErrUnsupportedPlatform }

// Endpoint is empty: no plugin runs on this platform.
func (s *Server) Endpoint() string { return "" }

// Wait returns at once.
func (s *Server) Wait() error { return ErrUnsupportedPlatform }

// Stop does nothing.
func (s *Server) Stop() {}
