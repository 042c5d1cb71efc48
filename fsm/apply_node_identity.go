package fsm

import (
	"bytes"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// ErrNodeSecretMismatch is returned in an ApplyResult when a registration
// carries a secret hash other than the one the node already has: another
// registration of the same node ID set its secret first, or the
// proposer's view was stale.
var ErrNodeSecretMismatch = errcode.New(codes.PermissionDenied, "node secret does not match the stored one")

// checkRegisterSecret is NodeRegister's identity rule. A command carrying a
// secret hash (proposed only once every server knows node identities) is
// refused when the node already has a different one, so two first
// registrations of one node ID cannot both set a secret. A command
// without one stores the node without one, as a server older than node
// identities does (it stores the command's node as decoded), so servers of
// both versions agree during an upgrade.
func checkRegisterSecret(existing, n *pb.Node) error {
	have, want := existing.GetSecretHash(), n.GetSecretHash()
	if len(have) == 0 || len(want) == 0 || bytes.Equal(have, want) {
		return nil
	}
	return fmt.Errorf("registration of node %s (%q): %w", n.GetId(), n.GetName(), ErrNodeSecretMismatch)
}

// applyNodeReadmit clears a node's secret hash. A node without one is left
// as it is (no write), so a retried readmit is not an error.
func applyNodeReadmit(tx *writeTxn, cmd *pb.NodeReadmitCommand) error {
	id := cmd.GetNodeId()
	if id == "" {
		return fmt.Errorf("%w: no node ID", ErrInvalidCommand)
	}
	existing, err := nodesTable.first(tx, nil, id)
	if err != nil {
		return err
	}
	if existing == nil {
		return fmt.Errorf("readmit of node %q: %w", id, ErrNodeNotFound)
	}
	if len(existing.GetSecretHash()) == 0 {
		return nil
	}
	n := proto.Clone(existing).(*pb.Node)
	n.SecretHash = nil
	n.ModifyIndex = tx.index
	return nodesTable.insert(tx, n)
}
