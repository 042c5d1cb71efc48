package authz

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/acl"
	"berth.dev/berth/rpc/pb"
)

// Resolver turns the secret a call carries into the ACL of its token, from
// a server's replicated state. Parsed policies are kept by name, modify
// index and rules text, so a policy is parsed once per change, not once per
// call, and a restored snapshot holding other rules at the same index is
// parsed anew.
type Resolver struct {
	state func() *fsm.StateStore
	now   func() time.Time

	mu     sync.Mutex
	parsed map[string]parsedPolicy
}

type parsedPolicy struct {
	modify uint64
	rules  string
	policy *acl.Policy // nil: its rules do not parse (a newer server's)
}

// NewResolver returns a resolver over state; now is the clock expiry is
// read with.
func NewResolver(state func() *fsm.StateStore, now func() time.Time) *Resolver {
	return &Resolver{state: state, now: now, parsed: map[string]parsedPolicy{}}
}

// Caller is who a call was resolved to: its token (nil without one) and
// its ACL.
type Caller struct {
	Token *pb.ACLToken
	ACL   *acl.ACL
}

// Accessor is the caller's accessor ID, "anonymous" without a token: what
// a log line names (never the secret).
func (c *Caller) Accessor() string {
	if c == nil || c.Token == nil {
		return "anonymous"
	}
	return c.Token.GetAccessorId()
}

// Resolve returns the caller of secret: "" is anonymous, governed by the
// policy named anonymous (nothing allowed when there is none). It fails
// with acl.ErrTokenNotFound or acl.ErrTokenExpired.
func (r *Resolver) Resolve(secret string) (*Caller, error) {
	st := r.state()
	if secret == "" {
		p, err := r.policy(st, acl.AnonymousPolicy)
		if err != nil {
			return nil, err
		}
		return &Caller{ACL: acl.New(p)}, nil
	}
	tok, err := st.ACLTokenBySecretHash(nil, acl.HashSecret(secret))
	if err != nil {
		return nil, err
	}
	// The index found the row by the secret's hash; the constant-time
	// compare keeps the rule that a secret is only ever compared so.
	if tok == nil || !acl.Match(tok.GetSecretHash(), secret) {
		return nil, acl.ErrTokenNotFound
	}
	if exp := tok.GetExpirationTime(); exp != 0 && !r.now().Before(time.Unix(0, exp)) {
		return nil, fmt.Errorf("%w: token %s expired at %s", acl.ErrTokenExpired, tok.GetAccessorId(), time.Unix(0, exp).UTC().Format(time.RFC3339))
	}
	if tok.GetType() == fsm.ACLTokenManagement {
		return &Caller{Token: tok, ACL: acl.Management()}, nil
	}
	policies := make([]*acl.Policy, 0, len(tok.GetPolicies()))
	for _, name := range tok.GetPolicies() {
		p, err := r.policy(st, name)
		if err != nil {
			return nil, err
		}
		policies = append(policies, p)
	}
	return &Caller{Token: tok, ACL: acl.New(policies...)}, nil
}

// policy is the parsed policy called name; nil when there is none.
func (r *Resolver) policy(st *fsm.StateStore, name string) (*acl.Policy, error) {
	row, err := st.ACLPolicy(nil, name)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if row == nil {
		delete(r.parsed, name) // deleted: the cache holds only stored policies
		return nil, nil
	}
	if c, ok := r.parsed[name]; ok && c.modify == row.GetModifyIndex() && c.rules == row.GetRules() {
		return c.policy, nil
	}
	p, err := acl.Parse(name+".hcl", []byte(row.GetRules()))
	if err != nil {
		p = nil // stored by a newer server with rules this one does not know: it grants nothing here
	}
	r.parsed[name] = parsedPolicy{modify: row.GetModifyIndex(), rules: row.GetRules(), policy: p}
	return p, nil
}

// SecretOf returns the secret the incoming call in ctx carries ("" for
// none), or acl.ErrBadTokenHeader.
func SecretOf(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	return acl.FromMetadata(md.Get(acl.MetadataKey))
}

// Authorize resolves the caller of ctx and checks need and extra. Calls
// whose need is checked elsewhere (None, Node, Server) are not resolved.
func (r *Resolver) Authorize(ctx context.Context, need Need, extra []Need) (*Caller, error) {
	switch need.Kind {
	case None, Node, Server:
		return nil, nil
	}
	secret, err := SecretOf(ctx)
	if err != nil {
		return nil, err
	}
	c, err := r.Resolve(secret)
	if err != nil {
		return nil, err
	}
	for _, n := range append([]Need{need}, extra...) {
		if err := Check(n, c.ACL, c.Token != nil); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Denied reports whether err is a refusal of Authorize for a resolved
// caller (403), as opposed to an unknown or expired token (401).
func Denied(err error) bool { return errors.Is(err, acl.ErrPermissionDenied) }
