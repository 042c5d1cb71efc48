package tunnel

import (
	"math/rand/v2"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"berth.dev/berth/rpc"
)

// NodeIDHeader is the metadata key of the Open stream that names the node.
const NodeIDHeader = "berth-node-id"

// OpenedAtHeader is the metadata key of the Open stream that says when the
// node opened it, in unix nanoseconds by the node's clock: one clock orders
// a node's tunnels on every server.
const OpenedAtHeader = "berth-tunnel-opened-at"

// Defaults of Keepalive.
const (
	DefaultKeepAliveInterval = 10 * time.Second
	DefaultKeepAliveTimeout  = 10 * time.Second
)

// Keepalive says how a session finds out that its peer is gone: a ping every
// Interval that must be answered within Timeout (which also bounds a write
// blocked on the peer), or the session closes. Zero fields take the
// defaults.
//
// AtLeast, when set, is read before each ping, and the session pings no
// more often than it says: the servers and the nodes pass a third of
// the heartbeat TTL, which grows with the cluster (nodes.ScaledTTL), so
// that the tunnels' pings, like the heartbeats, stay about as many per
// second however many nodes there are. At a fixed 10 s, 10,000 nodes'
// tunnels had the servers answer 2,000 pings a second against 50
// heartbeats. A call's stream open still gives up after Interval plus
// Timeout.
type Keepalive struct {
	Interval time.Duration
	Timeout  time.Duration
	AtLeast  func() time.Duration
}

func (k Keepalive) yamux(logger hclog.Logger) *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = true
	c.KeepAliveInterval = k.Interval
	if c.KeepAliveInterval <= 0 {
		c.KeepAliveInterval = DefaultKeepAliveInterval
	}
	c.ConnectionWriteTimeout = k.Timeout
	if c.ConnectionWriteTimeout <= 0 {
		c.ConnectionWriteTimeout = DefaultKeepAliveTimeout
	}
	// A stream the peer never acknowledges is given up, and the session
	// with it, after the same time a keepalive gets.
	c.StreamOpenTimeout = c.KeepAliveInterval + c.ConnectionWriteTimeout
	if k.AtLeast != nil {
		// The tunnel pings itself (pingLoop), each wait read anew: a
		// session opened while the cluster was small slows down as it
		// grows. yamux's own keepalive reads its interval once.
		c.EnableKeepAlive = false
	}
	c.LogOutput = nil
	// yamux logs every ended session as an error ("Failed to read
	// header: context canceled"), a normal close included; the tunnel's
	// own logs say when and why a session ended, so yamux's are details.
	c.Logger = logger.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug})
	return c
}

// every is the wait before a session's next ping: Interval (or the
// default), stretched to AtLeast now.
func (k Keepalive) every() time.Duration {
	d := k.Interval
	if d <= 0 {
		d = DefaultKeepAliveInterval
	}
	if k.AtLeast != nil {
		d = max(d, k.AtLeast())
	}
	return d
}

// pingLoop keeps a session whose keepalive has AtLeast alive: a ping after
// every wait (less up to a quarter, so sessions opened together do not
// ping together), and a ping unanswered within Timeout (yamux's
// ConnectionWriteTimeout) closes the session, as yamux's own keepalive
// does. It returns when the session closes; without AtLeast yamux pings.
func (k Keepalive) pingLoop(mux *yamux.Session) {
	if k.AtLeast == nil {
		return
	}
	for {
		d := k.every()
		t := time.NewTimer(d - rand.N(d/4+1))
		select {
		case <-mux.CloseChan():
			t.Stop()
			return
		case <-t.C:
		}
		if _, err := mux.Ping(); err != nil {
			_ = mux.Close()
			return
		}
	}
}

// dialOptions are those of the servers' connections to a node: the same
// message limit as every berth connection.
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(rpc.MaxMessageSize), grpc.MaxCallSendMsgSize(rpc.MaxMessageSize)),
	}
}
