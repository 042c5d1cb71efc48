package fsm

import (
	"encoding/hex"
	"fmt"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// ACL tables: policies by name, tokens by accessor ID (and by the hash of
// their secret: a request is resolved from the hash of the secret it
// carries), and the one row recording the bootstrap. Written only by the
// ACL commands, which are proposed only once every server is at the ACL
// gate (host/server/endpoints/acl.go aclSince).
const (
	// TableACLPolicies holds ACL policies (pb.ACLPolicy) by name.
	TableACLPolicies = "acl_policies"
	// TableACLTokens holds ACL tokens (pb.ACLToken) by accessor ID; never
	// a secret, only its SHA-256.
	TableACLTokens = "acl_tokens"
	// TableACLBootstrap holds one pb.TableIndex, table "bootstrap", whose
	// index is the raft index of the last ACL bootstrap.
	TableACLBootstrap = "acl_bootstrap"
)

var (
	aclPoliciesTable  = newTable(TableACLPolicies, (*pb.ACLPolicy).GetName)
	aclTokensTable    = newTable(TableACLTokens, (*pb.ACLToken).GetAccessorId)
	aclTokensBySecret = aclTokensTable.uniqueIndex("secret", secretHashKey)
	aclBootstrapTable = newTable(TableACLBootstrap, (*pb.TableIndex).GetTable)
)

// aclBootstrapKey is the key of the bootstrap row.
const aclBootstrapKey = "bootstrap"

func secretHashKey(t *pb.ACLToken) string { return hex.EncodeToString(t.GetSecretHash()) }

// ACL token types.
const (
	ACLTokenClient     = "client"
	ACLTokenManagement = "management"
)

// secretHashBytes is the size of a secret's SHA-256.
const secretHashBytes = 32

// ErrACLBootstrapped is returned in an ApplyResult of ACLBootstrap when the
// cluster was bootstrapped already and the command's reset index is not
// that bootstrap's raft index.
var ErrACLBootstrapped = errcode.New(codes.FailedPrecondition, "ACL bootstrap already done")

// ACLPolicy returns the policy called name, or nil. It adds a watch on it
// to ws (which may be nil). The policy must not be mutated.
func (r reader) ACLPolicy(ws memdb.WatchSet, name string) (*pb.ACLPolicy, error) {
	return aclPoliciesTable.first(r, ws, name)
}

// ACLPolicies returns every policy sorted by name.
func (r reader) ACLPolicies(ws memdb.WatchSet) ([]*pb.ACLPolicy, error) {
	return aclPoliciesTable.list(r, ws)
}

// ACLToken returns the token with the accessor ID, or nil.
func (r reader) ACLToken(ws memdb.WatchSet, accessor string) (*pb.ACLToken, error) {
	return aclTokensTable.first(r, ws, accessor)
}

// ACLTokenBySecretHash returns the token whose secret hashes to hash, or
// nil.
func (r reader) ACLTokenBySecretHash(ws memdb.WatchSet, hash []byte) (*pb.ACLToken, error) {
	if len(hash) != secretHashBytes {
		return nil, nil
	}
	return aclTokensBySecret.first(r, ws, hex.EncodeToString(hash))
}

// ACLTokens returns every token sorted by accessor ID.
func (r reader) ACLTokens(ws memdb.WatchSet) ([]*pb.ACLToken, error) {
	return aclTokensTable.list(r, ws)
}

// ACLBootstrapIndex returns the raft index of the last ACL bootstrap; 0
// when the cluster was never bootstrapped.
func (r reader) ACLBootstrapIndex() (uint64, error) {
	row, err := aclBootstrapTable.first(r, nil, aclBootstrapKey)
	return row.GetIndex(), err
}

// applyACLPolicyUpsert stores policies as given, keeping each one's create
// index. The servers parse a policy's rules before proposing it; the state
// machine only checks what it keys on.
func applyACLPolicyUpsert(tx *writeTxn, cmd *pb.ACLPolicyUpsertCommand) error {
	if len(cmd.GetPolicies()) == 0 {
		return fmt.Errorf("%w: no policy", ErrInvalidCommand)
	}
	for _, p := range cmd.GetPolicies() {
		if p.GetName() == "" {
			return fmt.Errorf("%w: a policy has no name", ErrInvalidCommand)
		}
	}
	for _, p := range cmd.GetPolicies() {
		existing, err := aclPoliciesTable.first(tx, nil, p.GetName())
		if err != nil {
			return err
		}
		p.CreateIndex, p.ModifyIndex = tx.index, tx.index
		if existing != nil {
			p.CreateIndex = existing.GetCreateIndex()
		}
		if err := aclPoliciesTable.insert(tx, p); err != nil {
			return err
		}
	}
	return nil
}

// applyACLPolicyDelete deletes policies; a name not stored is skipped, so
// a retried delete succeeds. Tokens naming a deleted policy keep the name
// and lose what it granted.
func applyACLPolicyDelete(tx *writeTxn, cmd *pb.ACLPolicyDeleteCommand) error {
	for _, name := range cmd.GetNames() {
		existing, err := aclPoliciesTable.first(tx, nil, name)
		if err != nil {
			return err
		}
		if existing == nil {
			continue
		}
		if err := aclPoliciesTable.delete(tx, existing); err != nil {
			return err
		}
	}
	return nil
}

// checkNewToken refuses a token the state must never hold.
func checkNewToken(t *pb.ACLToken) error {
	switch {
	case t.GetAccessorId() == "":
		return fmt.Errorf("%w: a token has no accessor ID", ErrInvalidCommand)
	case len(t.GetSecretHash()) != secretHashBytes:
		return fmt.Errorf("%w: token %s: secret hash of %d bytes, want %d", ErrInvalidCommand, t.GetAccessorId(), len(t.GetSecretHash()), secretHashBytes)
	case t.GetType() == ACLTokenManagement && len(t.GetPolicies()) > 0:
		return fmt.Errorf("%w: management token %s names policies", ErrInvalidCommand, t.GetAccessorId())
	case t.GetType() == ACLTokenClient && len(t.GetPolicies()) == 0:
		return fmt.Errorf("%w: client token %s names no policy", ErrInvalidCommand, t.GetAccessorId())
	case t.GetType() != ACLTokenClient && t.GetType() != ACLTokenManagement:
		return fmt.Errorf("%w: token %s: type %q is not client or management", ErrInvalidCommand, t.GetAccessorId(), t.GetType())
	}
	return nil
}

// applyACLTokenUpsert creates tokens, or updates the name and policies of
// existing ones: a token's secret hash, type, create and expiration time
// never change once stored.
func applyACLTokenUpsert(tx *writeTxn, cmd *pb.ACLTokenUpsertCommand) error {
	if len(cmd.GetTokens()) == 0 {
		return fmt.Errorf("%w: no token", ErrInvalidCommand)
	}
	rows := make([]*pb.ACLToken, 0, len(cmd.GetTokens()))
	for _, t := range cmd.GetTokens() {
		if t.GetAccessorId() == "" {
			return fmt.Errorf("%w: a token has no accessor ID", ErrInvalidCommand)
		}
		existing, err := aclTokensTable.first(tx, nil, t.GetAccessorId())
		if err != nil {
			return err
		}
		t.CreateIndex, t.ModifyIndex = tx.index, tx.index
		if existing != nil {
			row := proto.Clone(existing).(*pb.ACLToken)
			row.Name, row.Policies, row.ModifyIndex = t.GetName(), t.GetPolicies(), tx.index
			t = row
		}
		if err := checkNewToken(t); err != nil {
			return err
		}
		rows = append(rows, t)
	}
	for _, t := range rows {
		if err := aclTokensTable.insert(tx, t); err != nil {
			return err
		}
	}
	return nil
}

// applyACLTokenDelete deletes tokens; an accessor not stored is skipped.
func applyACLTokenDelete(tx *writeTxn, cmd *pb.ACLTokenDeleteCommand) error {
	for _, id := range cmd.GetAccessorIds() {
		existing, err := aclTokensTable.first(tx, nil, id)
		if err != nil {
			return err
		}
		if existing == nil {
			continue
		}
		if err := aclTokensTable.delete(tx, existing); err != nil {
			return err
		}
	}
	return nil
}

// applyACLBootstrap stores the first management token and records the
// bootstrap's raft index. Once done it is refused (ErrACLBootstrapped)
// unless the command's reset index is that recorded index: the operator
// read it from the refusal and wrote it in the reset file, and a reset
// works once, since the new bootstrap records a new index.
func applyACLBootstrap(tx *writeTxn, cmd *pb.ACLBootstrapCommand) error {
	t := cmd.GetToken()
	if t == nil {
		return fmt.Errorf("%w: no token", ErrInvalidCommand)
	}
	if t.GetType() != ACLTokenManagement {
		return fmt.Errorf("%w: bootstrap token %s is of type %q, not management", ErrInvalidCommand, t.GetAccessorId(), t.GetType())
	}
	if err := checkNewToken(t); err != nil {
		return err
	}
	row, err := aclBootstrapTable.first(tx, nil, aclBootstrapKey)
	if err != nil {
		return err
	}
	if row != nil && cmd.GetResetIndex() != row.GetIndex() {
		return fmt.Errorf("%w (reset index: %d)", ErrACLBootstrapped, row.GetIndex())
	}
	if existing, err := aclTokensTable.first(tx, nil, t.GetAccessorId()); err != nil {
		return err
	} else if existing != nil {
		return fmt.Errorf("%w: token %s exists", ErrInvalidCommand, t.GetAccessorId())
	}
	t.CreateIndex, t.ModifyIndex = tx.index, tx.index
	if err := aclTokensTable.insert(tx, t); err != nil {
		return err
	}
	return aclBootstrapTable.insert(tx, &pb.TableIndex{Table: aclBootstrapKey, Index: tx.index})
}
