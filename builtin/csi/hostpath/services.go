//go:build linux

package hostpath

import (
	"fmt"
	"sync/atomic"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// Services are the plugin's CSI servers without a listener, so that they
// can be served on any grpc.Server: Start's own on a unix socket, or
// go-plugin's when the plugin runs as a storage adapter
// (builtin/csi/adapter). Build them with NewServices and Close them once
// the server that serves them has stopped.
type Services struct {
	cfg  runtimeConfig
	log  hclog.Logger
	pool string
	id   *identity
	ctrl *controller
	node *node

	delaySeq atomic.Uint64 // numbers the fault-injection markers
}

// NewServices opens the state directory and builds the servers for cfg's
// mode. cfg.Endpoint is ignored: the caller listens.
func NewServices(cfg Config) (*Services, error) {
	rc, err := cfg.validateServices()
	if err != nil {
		return nil, err
	}
	return newServices(rc)
}

func newServices(rc runtimeConfig) (*Services, error) {
	log := rc.Logger.Named("csi-hostpath")
	lay := layout{root: rc.StateDir}
	if err := lay.ensureLayout(); err != nil {
		return nil, fmt.Errorf("state directory %s: %w", rc.StateDir, err)
	}
	pool, err := lay.poolID()
	if err != nil {
		return nil, fmt.Errorf("state directory %s: %w", rc.StateDir, err)
	}
	rc.Logger = log
	s := &Services{cfg: rc, log: log, pool: pool, id: &identity{cfg: rc, lay: lay}}
	locks := newKeyedLocks()
	if rc.controller {
		if s.ctrl, err = newController(rc, lay, pool, locks); err != nil {
			return nil, err
		}
	}
	if rc.node {
		if s.node, err = newNode(rc, lay, pool, locks); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Identity is the identity server.
func (s *Services) Identity() csi.IdentityServer { return s.id }

// Controller is the controller server, nil in node mode. (A nil
// *controller must not become a non-nil interface.)
func (s *Services) Controller() csi.ControllerServer {
	if s.ctrl == nil {
		return nil
	}
	return s.ctrl
}

// Node is the node server, nil in controller mode.
func (s *Services) Node() csi.NodeServer {
	if s.node == nil {
		return nil
	}
	return s.node
}

// RegisterExtra registers what a CSI server has besides identity,
// controller and node: the group controller, in controller and monolith
// mode.
func (s *Services) RegisterExtra(g *grpc.Server) {
	if s.ctrl != nil {
		csi.RegisterGroupControllerServer(g, &groupController{c: s.ctrl})
	}
}

// Register registers every service of the plugin on g.
func (s *Services) Register(g *grpc.Server) {
	csi.RegisterIdentityServer(g, s.id)
	if s.ctrl != nil {
		csi.RegisterControllerServer(g, s.ctrl)
	}
	if s.node != nil {
		csi.RegisterNodeServer(g, s.node)
	}
	s.RegisterExtra(g)
}

// ServerOptions are the options a grpc.Server serving s should have: the
// interceptor that logs each call (secrets removed) and turns a panic into
// an Internal error instead of a dead plugin, and, when the config asks for
// fault injection, the one that delays calls.
func (s *Services) ServerOptions() []grpc.ServerOption {
	if len(s.cfg.DelayBefore)+len(s.cfg.DelayAfter) > 0 {
		return []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.intercept, s.delay)}
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.intercept)}
}

// Describe returns key/value pairs describing the plugin, for a log line.
func (s *Services) Describe() []any {
	return []any{"mode", s.cfg.Mode, "node", s.cfg.NodeID, "state_dir", s.cfg.StateDir,
		"pool", s.pool, "capacity", s.cfg.Capacity, "max_volume_size", s.cfg.MaxVolumeSize, "max_volumes", s.cfg.MaxVolumes}
}

// Close releases the state directory's locks. Call it after the server
// serving s has stopped.
func (s *Services) Close() {
	if s.ctrl != nil {
		s.ctrl.close()
	}
	if s.node != nil {
		s.node.close()
	}
}
