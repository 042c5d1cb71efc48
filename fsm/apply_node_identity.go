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

// checkRegisterSecret is NodeRegister's identity rule; it settles the
// secret hash the registered node n keeps.
//
//   - A command carrying checked_secret_hash (every proposer that knows
//     node identities sets it: the hash it found and checked the
//     registration against, empty for none) is refused when the stored
//     hash is no longer that one: a readmit, or another registration,
//     committed between the check and this apply, and the registration
//     must not put an old secret back.
//   - A command carrying a hash is refused when the node already has a
//     different one, so two first registrations of one node ID cannot
//     both set a secret.
//   - A command without a hash never clears a stored one: the node keeps
//     it. A proposer that knows node identities puts the stored hash on
//     every registration of a node that has one, so only an older
//     proposer's command comes here without it. Hashes are stored only
//     once every server knows node identities (nodeSecretsSince), and no
//     older server joins after (the table rule), so no older server
//     applies such a command; keeping the hash fails closed where an
//     operator downgrades a server anyway. Only NodeReadmit clears it.
func checkRegisterSecret(existing *pb.Node, cmd *pb.NodeRegisterCommand) error {
	n := cmd.GetNode()
	have, want := existing.GetSecretHash(), n.GetSecretHash()
	if cmd.CheckedSecretHash != nil && !bytes.Equal(have, cmd.GetCheckedSecretHash()) {
		return fmt.Errorf("registration of node %s (%q) was checked against a secret the node no longer has (re-admitted or registered again since): %w",
			n.GetId(), n.GetName(), ErrNodeSecretMismatch)
	}
	switch {
	case len(want) == 0:
		n.SecretHash = have
	case len(have) > 0 && !bytes.Equal(have, want):
		return fmt.Errorf("registration of node %s (%q): %w", n.GetId(), n.GetName(), ErrNodeSecretMismatch)
	}
	// readmitted is the servers' word, never the registering client's:
	// kept while the node has no secret, cleared by the registration that
	// stores one (the adoption a readmit allowed). has_secret is only
	// ever computed for answers.
	n.Readmitted = existing.GetReadmitted() && len(n.GetSecretHash()) == 0
	n.HasSecret = false
	return nil
}

// applyNodeReadmit clears a node's secret hash and marks it readmitted,
// so a server enforcing node identity strictly admits the secret of its
// next registration (and only that one: the registration storing a hash
// clears the mark). A node already readmitted without a hash is left as
// it is (no write), so a retried readmit is not an error.
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
	if len(existing.GetSecretHash()) == 0 && existing.GetReadmitted() {
		return nil
	}
	n := proto.Clone(existing).(*pb.Node)
	n.SecretHash = nil
	n.Readmitted = true
	n.ModifyIndex = tx.index
	return nodesTable.insert(tx, n)
}
