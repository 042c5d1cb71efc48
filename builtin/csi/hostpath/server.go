//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
)

// ErrEndpointInUse is returned by Run and Start when another process already
// serves the endpoint's socket.
var ErrEndpointInUse = errcode.New(codes.FailedPrecondition, "endpoint already served by another process")

// Server is a running hostpath plugin, as returned by Start.
type Server struct {
	cfg      runtimeConfig
	log      hclog.Logger
	grpc     *grpc.Server
	endpoint string
	svc      *Services

	stopOnce sync.Once
	stopReq  chan struct{} // closed by Stop
	done     chan struct{} // closed when fully stopped
	serveErr error         // written before done is closed
}

// Run serves the plugin on cfg.Endpoint until ctx ends, then stops
// gracefully (in-flight calls get cfg.ShutdownGrace to finish) and removes
// the socket.
func Run(ctx context.Context, cfg Config) error {
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	return s.Wait()
}

// Start opens the state directory, listens on cfg.Endpoint and serves in the
// background until ctx ends or Stop is called. When it returns without error
// the socket accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	rc, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	// Listen first: a plugin that cannot have its socket must not register
	// as a node.
	lis, err := listenUnix(rc.socketPath)
	if err != nil {
		return nil, err
	}
	svc, err := newServices(rc)
	if err != nil {
		lis.Close()
		return nil, err
	}
	s := &Server{cfg: svc.cfg, log: svc.log, svc: svc, endpoint: "unix://" + rc.socketPath, stopReq: make(chan struct{}), done: make(chan struct{})}
	s.grpc = grpc.NewServer(svc.ServerOptions()...)
	svc.Register(s.grpc)
	served := make(chan error, 1)
	go func() { served <- s.grpc.Serve(lis) }()
	// This goroutine alone shuts the server down, whatever asks for it.
	go func() {
		var err error
		select {
		case <-ctx.Done():
		case <-s.stopReq:
		case err = <-served:
			// Serve only returns by itself when the listener fails.
		}
		s.shutdown(err)
	}()
	s.log.Info("serving", append([]any{"endpoint", s.endpoint}, svc.Describe()...)...)
	return s, nil
}

// Endpoint is the plugin's address, "unix://" and the socket path.
func (s *Server) Endpoint() string { return s.endpoint }

// Wait blocks until the plugin has stopped and returns why, if not because
// it was asked to.
func (s *Server) Wait() error {
	<-s.done
	return s.serveErr
}

// Stop stops the plugin as if its context had ended, and waits for it.
func (s *Server) Stop() {
	s.stopOnce.Do(func() { close(s.stopReq) })
	<-s.done
}

// shutdown lets in-flight calls finish (for at most ShutdownGrace, then
// cancels them), closes the socket and releases the state directory.
func (s *Server) shutdown(serveErr error) {
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(s.cfg.ShutdownGrace):
		s.log.Warn("in-flight calls did not finish in time; cancelling them", "grace", s.cfg.ShutdownGrace)
		s.grpc.Stop()
		<-stopped
	}
	// Stopping closed the listener, which removed the socket file (net
	// unlinks the sockets it creates).
	s.svc.Close()
	if serveErr != nil {
		s.serveErr = fmt.Errorf("serve %s: %w", s.endpoint, serveErr)
		s.log.Error("stopped", "endpoint", s.endpoint, "error", serveErr)
	} else {
		s.log.Info("stopped", "endpoint", s.endpoint)
	}
	close(s.done)
}

// listenUnix listens on a unix socket at path, replacing a stale socket file
// left by a process that died, but never one that still answers.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, &ConfigError{Field: "Endpoint", Value: path, Err: errors.New("exists and is not a socket")}
		}
		if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
			conn.Close()
			return nil, fmt.Errorf("%w: %s", ErrEndpointInUse, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// Whoever can talk to the socket can make this process bind-mount as
	// root: only the owner may.
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return nil, err
	}
	return lis, nil
}

// intercept logs every call (requests at trace level, secrets removed) and
// turns a panic into an Internal error instead of a dead plugin.
func (s *Services) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	if s.log.IsTrace() {
		s.log.Trace("call", "method", info.FullMethod, "request", sanitize(req))
	}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in call", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "%s: internal error: %v", info.FullMethod, r)
		}
		took := time.Since(start)
		switch status.Code(err) {
		case codes.OK:
			s.log.Debug("call done", "method", info.FullMethod, "took", took)
		case codes.Internal, codes.Unknown, codes.DataLoss:
			s.log.Error("call failed", "method", info.FullMethod, "took", took, "error", err)
		default:
			s.log.Info("call refused", "method", info.FullMethod, "took", took, "error", err)
		}
	}()
	return handler(ctx, req)
}
