package endpoints

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// nodeSecretsSince is the first berth version whose servers issue node
// secrets: NodeRegister carrying a secret hash (refused when the stored
// one differs) and NodeReadmit. Until every server is at it, nodes
// register as before, without a secret: an older server would store a
// registration's node without its hash (it stores the command's node as
// decoded) and would fail on NodeReadmit, an unknown command.
var nodeSecretsSince = versions.MustConstraint(">= " + NodeSecretsSinceVersion)

// NodeSecretsSinceVersion is the version nodeSecretsSince names.
const NodeSecretsSinceVersion = "0.1.0-dev.4"

// secretBytes is a node secret's entropy: 256 bits.
const secretBytes = 32

var (
	// ErrNodeSecret refuses a node call whose node secret (gRPC metadata
	// rpc.NodeSecretHeader) is missing or is not the secret of the node
	// the request names: a node acts only as itself.
	ErrNodeSecret = errcode.New(codes.PermissionDenied, "node secret missing or not the named node's")
	// ErrNodeSecretLost refuses the registration of a node the servers
	// issued a secret to, by a client that presents none: its state was
	// lost (or it is another machine using the node's ID). An operator
	// re-admits it with `berth node readmit`.
	ErrNodeSecretLost = errcode.New(codes.PermissionDenied, "node registered with a secret the client did not present")
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

// newNodeSecret returns a fresh secret: 256 bits from crypto/rand, hex.
func newNodeSecret() (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a node secret: %w", err)
	}
	return hex.EncodeToString(b), nil
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

// identify decides the secret of a registering node n (a clone the
// caller proposes): the stored hash when the client proves it, a new
// secret (returned, its hash set on n) when the node has none, nothing
// while some server is older than nodeSecretsSince.
func (s *api) identify(ctx context.Context, n *pb.Node) (string, error) {
	n.SecretHash = nil
	if s.RequireServersAt(nodeSecretsSince, NodeSecretsSinceVersion, "node secrets") != nil {
		return "", nil
	}
	existing, err := s.State().NodeByID(nil, n.GetId())
	if err != nil {
		return "", err
	}
	presented := rpc.NodeSecret(ctx)
	if hash := existing.GetSecretHash(); len(hash) > 0 {
		readmit := fmt.Sprintf("if the node lost its state, re-admit it with `berth node readmit %s` and it is issued a new secret at its next registration", n.GetId())
		switch {
		case presented == "":
			return "", fmt.Errorf("registration of node %s (%q) refused: it was issued a secret and this client presents none; %s: %w",
				n.GetId(), existing.GetName(), readmit, ErrNodeSecretLost)
		case !secretMatches(presented, hash):
			return "", fmt.Errorf("registration of node %s (%q) refused: the node secret presented is not the node's; %s: %w",
				n.GetId(), existing.GetName(), readmit, ErrNodeSecret)
		}
		n.SecretHash = hash
		return "", nil
	}
	secret, err := newNodeSecret()
	if err != nil {
		return "", err
	}
	n.SecretHash = HashNodeSecret(secret)
	return secret, nil
}

// wantsSecret reports whether a heartbeating node should register again to
// be issued a secret: it has none (it registered before every server knew
// node identities, or was re-admitted) and every server now knows them.
func (s *api) wantsSecret(n *pb.Node) bool {
	return len(n.GetSecretHash()) == 0 && s.RequireServersAt(nodeSecretsSince, NodeSecretsSinceVersion, "node secrets") == nil
}

// redactNode returns n without its secret hash (a clone when it has
// one): API answers never carry it.
func redactNode(n *pb.Node) *pb.Node {
	if len(n.GetSecretHash()) == 0 {
		return n
	}
	c := proto.Clone(n).(*pb.Node)
	c.SecretHash = nil
	return c
}

// Readmit clears a node's secret hash (NodeReadmit), so its next
// registration is issued a new secret: for a node whose state DB was lost
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
	s.Logger.Warn("node readmitted: its secret is cleared, its next registration is issued a new one", "node_id", n.GetId(), "node_name", n.GetName())
	return &pb.NodeOpResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}
