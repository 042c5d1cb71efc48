package endpoints

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// nodeSecretsSince is the first berth version whose servers admit node
// secrets: NodeRegister carrying a secret hash (refused when the stored
// one differs) and NodeReadmit. Until every server is at it, nodes
// register as before, without a secret: an older server would store a
// registration's node without its hash (it stores the command's node as
// decoded) and would fail on NodeReadmit, an unknown command.
var nodeSecretsSince = versions.MustConstraint(">= " + NodeSecretsSinceVersion)

// NodeSecretsSinceVersion is the version nodeSecretsSince names.
const NodeSecretsSinceVersion = "0.1.0-dev.4"

var (
	// ErrNodeSecret refuses a node call whose node secret (gRPC metadata
	// rpc.NodeSecretHeader) is missing or is not the secret of the node
	// the request names: a node acts only as itself.
	ErrNodeSecret = errcode.New(codes.PermissionDenied, "node secret missing or not the named node's")
	// ErrNodeSecretLost refuses the registration of a node the servers
	// admitted a secret for, by a client that presents none: its state was
	// lost (or it is another machine using the node's ID). An operator
	// re-admits it with `berth node readmit`.
	ErrNodeSecretLost = errcode.New(codes.PermissionDenied, "node registered with a secret the client did not present")
	// ErrMalformedNodeSecret refuses a first registration presenting a
	// secret that is not 64 lowercase hex digits (256 bits).
	ErrMalformedNodeSecret = errcode.New(codes.InvalidArgument, "node secret is not 64 lowercase hex digits (256 bits)")
)

// HashNodeSecret is what the node table keeps of a node secret: its
// SHA-256 (the secret is 256 random bits, so no slow hash is needed).
func HashNodeSecret(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// secretMatches compares a presented secret with a stored hash in
// constant time.
func secretMatches(presented string, hash []byte) bool {
	return presented != "" && subtle.ConstantTimeCompare(HashNodeSecret(presented), hash) == 1
}

// CheckNodeSecret refuses (ErrNodeSecret) a call naming nodeID unless it
// presents that node's secret. A node the servers do not know, or one
// without a secret (registered before every server knew node identities,
// or re-admitted and not yet registered), is not checked: there is no
// identity to prove, and the call's own handler answers for an unknown
// node. The error names the node, never the secret.
func CheckNodeSecret(st *fsm.StateStore, nodeID, presented string) error {
	if nodeID == "" {
		return nil
	}
	n, err := st.NodeByID(nil, nodeID)
	if err != nil {
		return err
	}
	if n == nil || len(n.GetSecretHash()) == 0 || secretMatches(presented, n.GetSecretHash()) {
		return nil
	}
	what := "no node secret"
	if presented != "" {
		what = "a node secret that is not node " + nodeID + "'s"
	}
	return fmt.Errorf("request naming node %s (%q) carries %s: %w", nodeID, n.GetName(), what, ErrNodeSecret)
}

// identify decides the secret hash of a registering node n (a clone the
// caller proposes) and returns the hash it checked the registration
// against (empty, not nil, for a node without one), for the command's
// checked_secret_hash.
//
// A node that has a hash is admitted only presenting its secret, whatever
// the version gate says, and keeps its hash: no registration clears it.
// The gate decides only the admission of a new secret: a node without one
// presenting a (well-formed) secret has it admitted once every server
// knows node identities; while some server is older, or has not recorded
// its version, it registers without one, and a heartbeat's register_again
// brings it back past the gate. A client presenting no secret (older than
// node identities) is issued none: its node is stored without a hash and
// its calls go unchecked until an upgraded client presents one.
func (s *api) identify(ctx context.Context, n *pb.Node) ([]byte, error) {
	n.SecretHash = nil
	existing, err := s.State().NodeByID(nil, n.GetId())
	if err != nil {
		return nil, err
	}
	presented := rpc.NodeSecret(ctx)
	if hash := existing.GetSecretHash(); len(hash) > 0 {
		readmit := fmt.Sprintf("if the node lost its state, re-admit it with `berth node readmit %s` and its next registration sets a new secret", n.GetId())
		switch {
		case presented == "":
			return nil, fmt.Errorf("registration of node %s (%q) refused: the node has a secret and this client presents none; %s: %w",
				n.GetId(), existing.GetName(), readmit, ErrNodeSecretLost)
		case !secretMatches(presented, hash):
			return nil, fmt.Errorf("registration of node %s (%q) refused: the node secret presented is not the node's; %s: %w",
				n.GetId(), existing.GetName(), readmit, ErrNodeSecret)
		}
		n.SecretHash = hash
		return hash, nil
	}
	// Strict enforcement (past the gate) admits a secret for a node
	// without one only where no one else can have been using the ID: a
	// node the servers do not know yet, or one an operator re-admitted.
	enforcing := s.NodeIdentity.enforcing()
	if presented == "" {
		if enforcing {
			return nil, fmt.Errorf("registration of node %s (%q) refused: its client presents no node secret (it is older than %s) and node identity enforcement is strict; upgrade the client: %w",
				n.GetId(), n.GetName(), NodeSecretsSinceVersion, ErrNodeUnauthenticated)
		}
		s.NodeIdentity.unauthenticated(n.GetId(), n.GetName(), "registration without a secret")
		return []byte{}, nil
	}
	// The client made its secret before registering and stored it
	// (host/client): adopting it means an answer lost on the way (a
	// timed-out attempt whose proposal committed) costs nothing, as the
	// retry presents the same secret.
	if !rpc.WellFormedNodeSecret(presented) {
		return nil, fmt.Errorf("registration of node %s (%q): %w", n.GetId(), n.GetName(), ErrMalformedNodeSecret)
	}
	var below *GateRefusal
	switch err := s.RequireServersAt(nodeSecretsSince, NodeSecretsSinceVersion, "node secrets"); {
	case errors.As(err, &below):
		s.NodeIdentity.unauthenticated(n.GetId(), n.GetName(), "registration before every server knows node identities")
		return []byte{}, nil
	case err != nil:
		return nil, fmt.Errorf("registration of node %s (%q): reading the servers' versions: %w", n.GetId(), n.GetName(), err)
	}
	if enforcing && existing != nil && !existing.GetReadmitted() {
		return nil, fmt.Errorf("registration of node %s (%q) refused: the node is registered without a secret, so this secret cannot be told from another machine's, and node identity enforcement is strict; if this is the node's machine, re-admit it with `berth node readmit %s` and its next registration sets its secret: %w",
			n.GetId(), existing.GetName(), n.GetId(), ErrNodeUnauthenticated)
	}
	n.SecretHash = HashNodeSecret(presented)
	return []byte{}, nil
}

// wantsSecret reports whether a heartbeating node should register again to
// have its secret admitted: it has none (it registered before every server
// knew node identities, or was re-admitted), its client presents one (an
// older client, presenting none, would only register again without one)
// and every server now knows them.
func (s *api) wantsSecret(ctx context.Context, n *pb.Node) bool {
	return len(n.GetSecretHash()) == 0 && rpc.NodeSecret(ctx) != "" &&
		s.RequireServersAt(nodeSecretsSince, NodeSecretsSinceVersion, "node secrets") == nil
}

// redactNode returns n without its secret hash (a copy, has_secret set,
// when it has one): API answers never carry it, only whether there is one.
// The copy is shallow: it shares n's fields, as an answer for a node
// without a secret shares n itself (answers are read, never changed). A
// deep clone copied every driver's task schema for each node of each list
// (a tenth of an agent's CPU for GET /v1/nodes; issue 26).
func redactNode(n *pb.Node) *pb.Node {
	if len(n.GetSecretHash()) == 0 {
		return n
	}
	c := &pb.Node{}
	src, dst := n.ProtoReflect(), c.ProtoReflect()
	src.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(f, v)
		return true
	})
	dst.SetUnknown(src.GetUnknown())
	c.SecretHash = nil
	c.HasSecret = true
	return c
}

// Readmit clears a node's secret hash (NodeReadmit), so its next
// registration sets a new secret: for a node whose state DB was lost
// and whose registrations are refused with ErrNodeSecretLost.
func (e *nodeOpsEndpoint) Readmit(ctx context.Context, req *pb.NodeReadmitRequest) (*pb.NodeOpResponse, error) {
	s := e.s
	_, n, err := e.node(req.GetNodeId())
	if err != nil {
		return nil, err
	}
	if err := s.RequireServersAt(nodeSecretsSince, NodeSecretsSinceVersion, "node readmission"); err != nil {
		return nil, err
	}
	idx, err := s.Apply(ctx, fsm.NodeReadmit, &pb.NodeReadmitCommand{NodeId: n.GetId(), UpdatedAt: s.Clock.Now().UnixNano()})
	if err != nil {
		return nil, fmt.Errorf("readmitting node %s: %w", n.GetId(), err)
	}
	s.Logger.Warn("node readmitted: its secret is cleared, its next registration sets a new one", "node_id", n.GetId(), "node_name", n.GetName())
	return &pb.NodeOpResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}
