package endpoints

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/promtext"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// Node identity enforcement (server node_identity_enforcement), as Nomad's
// client_introduction enforcement: what a server does with a registration
// or node call for a node that has no secret (a node of a client older
// than node identities, or one not re-registered since it upgraded or was
// re-admitted). Such calls prove nothing: anyone with a client certificate
// who knows the node's ID can make them, and a registration presenting a
// secret adopts it, locking the real node out.
const (
	// EnforceWarn admits them, logging each node once per
	// unauthenticatedWarnEvery and counting every call
	// (berth_node_calls_unauthenticated_total).
	EnforceWarn = "warn"
	// EnforceStrict refuses them (ErrNodeUnauthenticated) once every
	// server knows node identities (nodeSecretsSince), except what a node
	// needs to get a secret at all: a registration presenting a secret
	// for a node that does not exist yet, or one an operator re-admitted
	// (Node.readmitted), and a re-admitted node's heartbeat (which answers
	// register_again). See (*NodeIdentity).Check and identify.
	EnforceStrict = "strict"
)

// unauthenticatedWarnEvery is how often a node's unauthenticated calls are
// logged in warn mode.
const unauthenticatedWarnEvery = 10 * time.Minute

// ErrNodeUnauthenticated refuses, under strict node identity enforcement,
// a registration or node call for a node that has no secret.
var ErrNodeUnauthenticated = errcode.New(codes.PermissionDenied, "node has no secret and node identity enforcement is strict")

var nodeCallsUnauthenticated = promtext.NewCounter("berth_node_calls_unauthenticated_total",
	"Registrations and node calls this server admitted for a node without a secret (node_identity_enforcement = \"warn\", or before every server knows node identities).")

// NodeIdentityMetrics returns the collectors of node identity
// enforcement, for the agent to register.
func NodeIdentityMetrics() []promtext.Collector {
	return []promtext.Collector{nodeCallsUnauthenticated}
}

// CheckEnforcement returns an error for a value other than "warn" or
// "strict" ("" is "warn").
func CheckEnforcement(v string) error {
	switch v {
	case "", EnforceWarn, EnforceStrict:
		return nil
	}
	return fmt.Errorf("node identity enforcement %q: want %q or %q", v, EnforceWarn, EnforceStrict)
}

// NodeIdentity is a server's node identity enforcement: the endpoints'
// registration rule (identify) and the node-call interceptors' check.
type NodeIdentity struct {
	strict  bool
	cluster Cluster
	logger  hclog.Logger
	clock   clock.Clock

	mu     sync.Mutex
	warned map[string]time.Time // node ID → last warning
}

// NewNodeIdentity returns the enforcement mode ("warn", "strict"; ""
// is "warn") over the servers' versions (for the gate).
func NewNodeIdentity(mode string, cluster Cluster, logger hclog.Logger, clk clock.Clock) (*NodeIdentity, error) {
	if err := CheckEnforcement(mode); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return &NodeIdentity{strict: mode == EnforceStrict, cluster: cluster, logger: logger, clock: clk, warned: map[string]time.Time{}}, nil
}

// enforcing reports whether secretless nodes are refused now: strict, and
// every server knows node identities (before that no node can have a
// secret, and refusing would refuse every node).
func (p *NodeIdentity) enforcing() bool {
	return p != nil && p.strict && p.cluster.RequireServersAt(nodeSecretsSince, NodeSecretsSinceVersion, "node secrets") == nil
}

// unauthenticated counts an admitted call for secretless node n and logs
// it, once per node per unauthenticatedWarnEvery.
func (p *NodeIdentity) unauthenticated(nodeID, name, what string) {
	nodeCallsUnauthenticated.Inc()
	if p == nil {
		return
	}
	now := p.clock.Now()
	p.mu.Lock()
	last, seen := p.warned[nodeID]
	warn := !seen || now.Sub(last) >= unauthenticatedWarnEvery
	if warn {
		if len(p.warned) >= 4096 {
			for id, t := range p.warned {
				if now.Sub(t) >= unauthenticatedWarnEvery {
					delete(p.warned, id)
				}
			}
		}
		p.warned[nodeID] = now
	}
	p.mu.Unlock()
	if warn {
		p.logger.Warn(fmt.Sprintf("node %s has no secret yet: calls for it are not authenticated; run its client at %s or later, then set node_identity_enforcement = \"strict\"",
			nodeID, NodeSecretsSinceVersion), "node_id", nodeID, "node_name", name, "admitted", what)
	}
}

// Check refuses a node call (method, naming nodeID) that does not present
// the node's secret (CheckNodeSecret). For a node without a secret, strict
// enforcement refuses it (ErrNodeUnauthenticated) except a re-admitted
// node's heartbeat, which answers register_again so the node's client
// registers and its secret is adopted; warn admits it, logged and
// counted. An unknown node is not checked: the call's handler answers.
func (p *NodeIdentity) Check(st *fsm.StateStore, method, nodeID, presented string) error {
	if err := CheckNodeSecret(st, nodeID, presented); err != nil || nodeID == "" {
		return err
	}
	n, err := st.NodeByID(nil, nodeID)
	if err != nil || n == nil || len(n.GetSecretHash()) > 0 {
		return err
	}
	if p.enforcing() && (method != pb.Nodes_Heartbeat_FullMethodName || !n.GetReadmitted()) {
		return fmt.Errorf("call %s for node %s (%q) refused: the node has no secret; run its client at %s or later and, if the node exists, re-admit it with `berth node readmit %s` so its next registration sets one: %w",
			method, nodeID, n.GetName(), NodeSecretsSinceVersion, nodeID, ErrNodeUnauthenticated)
	}
	p.unauthenticated(nodeID, n.GetName(), method)
	return nil
}

// Strict reports whether the mode is strict (whatever the gate).
func (p *NodeIdentity) Strict() bool { return p != nil && p.strict }
