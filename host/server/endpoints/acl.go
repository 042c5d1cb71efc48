package endpoints

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/authz"
	"berth.dev/berth/internal/acl"
	"berth.dev/berth/internal/durations"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// aclSince is the first berth version whose servers know the ACL commands
// and tables (fsm ACLPolicyUpsert … ACLBootstrap).
var aclSince = versions.MustConstraint(">= " + ACLSinceVersion)

// ACLSinceVersion is the version aclSince names.
const ACLSinceVersion = "0.1.0-dev.4"

// ACL endpoint errors.
var (
	// ErrACLPolicyNotFound is returned by the ACL endpoints for a policy
	// name that is not stored (get, delete, and a token naming it).
	ErrACLPolicyNotFound = errcode.New(codes.NotFound, "ACL policy not found")
	// ErrACLTokenNotFound is returned by the ACL endpoints for an accessor
	// ID that is not stored.
	ErrACLTokenNotFound = errcode.New(codes.NotFound, "ACL token not found")
	// ErrInvalidACLToken is returned by TokenCreate and TokenUpdate for a
	// token that cannot be made: an unknown type, a management token with
	// policies, a client token without, a negative TTL.
	ErrInvalidACLToken = errcode.New(codes.InvalidArgument, "invalid ACL token")
	// ErrACLResetFile is returned by Bootstrap when the reset file exists
	// but does not hold a raft index.
	ErrACLResetFile = errcode.New(codes.FailedPrecondition, "unreadable ACL bootstrap reset file")
	// ErrACLDisabled is returned by every ACL method but Authorize on a
	// server without acl.enabled: there no token is checked, so none may
	// be made (a token minted before ACL is turned on would be a way in).
	ErrACLDisabled = errcode.New(codes.FailedPrecondition, "ACL support disabled")
)

// enabled refuses an ACL method on a server without acl.enabled.
func (e *aclEndpoint) enabled() error {
	if !e.s.ACLEnabled {
		return fmt.Errorf("%w: set acl { enabled = true } on every agent to manage ACLs", ErrACLDisabled)
	}
	return nil
}

type aclEndpoint struct {
	pb.UnimplementedACLServer
	s *api
}

func (e *aclEndpoint) requireVersion() error {
	return e.s.RequireServersAt(aclSince, ACLSinceVersion, "ACL commands")
}

// Bootstrap makes the first management token. It succeeds once; after
// that only with the reset index, read from the reset file in the leader's
// data dir (host/server ACLResetFileName), which the refusal names.
func (e *aclEndpoint) Bootstrap(ctx context.Context, _ *pb.ACLBootstrapRequest) (*pb.ACLTokenSecretResponse, error) {
	if err := e.enabled(); err != nil {
		return nil, err
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	reset, err := e.resetIndex()
	if err != nil {
		return nil, err
	}
	secret, hash, err := acl.NewSecret(nil)
	if err != nil {
		return nil, err
	}
	tok := &pb.ACLToken{AccessorId: uuid.Generate(), Name: "Bootstrap Token", Type: fsm.ACLTokenManagement,
		SecretHash: hash, CreateTime: e.s.Clock.Now().UnixNano()}
	res, err := e.s.ApplyResult(ctx, fsm.ACLBootstrap, &pb.ACLBootstrapCommand{Token: tok, ResetIndex: reset})
	if err == nil {
		err = res.Err
	}
	if errors.Is(err, fsm.ErrACLBootstrapped) && e.s.ACLResetFile != "" {
		return nil, fmt.Errorf("%w; to bootstrap again, write the reset index into %s on the leader", err, e.s.ACLResetFile)
	}
	if err != nil {
		return nil, fmt.Errorf("ACL bootstrap: %w", err)
	}
	if e.s.ACLResetFile != "" && reset != 0 {
		// Spent: the next bootstrap records a new index anyway.
		_ = os.Remove(e.s.ACLResetFile)
	}
	e.s.Logger.Info("ACL bootstrapped", "accessor_id", tok.GetAccessorId(), "reset_index", reset)
	return &pb.ACLTokenSecretResponse{Token: tokenView(tok), SecretId: secret, Meta: &pb.WriteMeta{Index: res.Index}}, nil
}

// resetIndex is the index in the reset file; 0 when there is none.
func (e *aclEndpoint) resetIndex() (uint64, error) {
	if e.s.ACLResetFile == "" {
		return 0, nil
	}
	b, err := os.ReadFile(e.s.ACLResetFile)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrACLResetFile, e.s.ACLResetFile, err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s holds %q, want the reset index the bootstrap refusal named", ErrACLResetFile, e.s.ACLResetFile, strings.TrimSpace(string(b)))
	}
	return n, nil
}

// PolicyUpsert stores a policy whose rules parse (errors name the line and
// column in the rules).
func (e *aclEndpoint) PolicyUpsert(ctx context.Context, req *pb.ACLPolicyUpsertRequest) (*pb.ACLWriteResponse, error) {
	if err := e.enabled(); err != nil {
		return nil, err
	}
	p := req.GetPolicy()
	if err := acl.ValidName(p.GetName()); err != nil {
		return nil, err
	}
	if _, err := acl.Parse("policy "+p.GetName(), []byte(p.GetRules())); err != nil {
		return nil, fmt.Errorf("policy %q: %w", p.GetName(), err)
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	idx, err := e.s.Apply(ctx, fsm.ACLPolicyUpsert, &pb.ACLPolicyUpsertCommand{Policies: []*pb.ACLPolicy{
		{Name: p.GetName(), Description: p.GetDescription(), Rules: p.GetRules()}}})
	if err != nil {
		return nil, fmt.Errorf("storing policy %q: %w", p.GetName(), err)
	}
	return &pb.ACLWriteResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}

// PolicyDelete deletes a stored policy; NotFound for another name.
func (e *aclEndpoint) PolicyDelete(ctx context.Context, req *pb.ACLPolicyDeleteRequest) (*pb.ACLWriteResponse, error) {
	if err := e.enabled(); err != nil {
		return nil, err
	}
	if p, err := e.s.State().ACLPolicy(nil, req.GetName()); err != nil {
		return nil, err
	} else if p == nil {
		return nil, fmt.Errorf("policy %q: %w", req.GetName(), ErrACLPolicyNotFound)
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	idx, err := e.s.Apply(ctx, fsm.ACLPolicyDelete, &pb.ACLPolicyDeleteCommand{Names: []string{req.GetName()}})
	if err != nil {
		return nil, fmt.Errorf("deleting policy %q: %w", req.GetName(), err)
	}
	return &pb.ACLWriteResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}

// PolicyGet reads one policy.
func (e *aclEndpoint) PolicyGet(ctx context.Context, req *pb.ACLPolicyGetRequest) (*pb.ACLPolicyGetResponse, error) {
	if err := e.enabled(); err != nil {
		return nil, err
	}
	resp := &pb.ACLPolicyGetResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		p, err := st.ACLPolicy(ws, req.GetName())
		if err != nil {
			return 0, err
		}
		resp.Policy = p
		return st.Index(fsm.TableACLPolicies)
	})
	if err != nil {
		return nil, err
	}
	if resp.Policy == nil {
		return nil, fmt.Errorf("policy %q: %w", req.GetName(), ErrACLPolicyNotFound)
	}
	resp.Meta = meta
	return resp, nil
}

// PolicyList lists every policy by name.
func (e *aclEndpoint) PolicyList(ctx context.Context, req *pb.ACLPolicyListRequest) (*pb.ACLPolicyListResponse, error) {
	if err := e.enabled(); err != nil {
		return nil, err
	}
	resp := &pb.ACLPolicyListResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		ps, err := st.ACLPolicies(ws)
		if err != nil {
			return 0, err
		}
		resp.Policies = ps
		return st.Index(fsm.TableACLPolicies)
	})
	if err != nil {
		return nil, err
	}
	resp.Meta = meta
	return resp, nil
}

// checkTokenPolicies refuses a token of an unknown type, a management
// token with policies, a client token without, or naming a policy that is
// not stored.
func (e *aclEndpoint) checkTokenPolicies(typ string, policies []string) error {
	switch {
	case typ != fsm.ACLTokenClient && typ != fsm.ACLTokenManagement:
		return fmt.Errorf("%w: type %q is not client or management", ErrInvalidACLToken, typ)
	case typ == fsm.ACLTokenManagement && len(policies) > 0:
		return fmt.Errorf("%w: a management token takes no policies", ErrInvalidACLToken)
	case typ == fsm.ACLTokenClient && len(policies) == 0:
		return fmt.Errorf("%w: a client token needs at least one policy", ErrInvalidACLToken)
	}
	for _, name := range policies {
		if p, err := e.s.State().ACLPolicy(nil, name); err != nil {
			return err
		} else if p == nil {
			return fmt.Errorf("token names policy %q: %w", name, ErrACLPolicyNotFound)
		}
	}
	return nil
}

// TokenCreate makes a token and answers its secret, once.
func (e *aclEndpoint) TokenCreate(ctx context.Context, req *pb.ACLTokenCreateRequest) (*pb.ACLTokenSecretResponse, error) {
	if err := e.enabled(); err != nil {
		return nil, err
	}
	typ := req.GetType()
	if typ == "" {
		typ = fsm.ACLTokenClient
	}
	policies := dedupe(req.GetPolicies())
	if err := e.checkTokenPolicies(typ, policies); err != nil {
		return nil, err
	}
	if req.GetTtlMs() < 0 {
		return nil, fmt.Errorf("%w: ttl %dms is negative", ErrInvalidACLToken, req.GetTtlMs())
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	secret, hash, err := acl.NewSecret(nil)
	if err != nil {
		return nil, err
	}
	now := e.s.Clock.Now()
	tok := &pb.ACLToken{AccessorId: uuid.Generate(), Name: req.GetName(), Type: typ, Policies: policies,
		SecretHash: hash, CreateTime: now.UnixNano()}
	if ttl := durations.FromMs(req.GetTtlMs()); ttl > 0 {
		tok.ExpirationTime = now.Add(ttl).UnixNano()
	}
	idx, err := e.s.Apply(ctx, fsm.ACLTokenUpsert, &pb.ACLTokenUpsertCommand{Tokens: []*pb.ACLToken{tok}})
	if err != nil {
		return nil, fmt.Errorf("creating token: %w", err)
	}
	tok.CreateIndex, tok.ModifyIndex = idx, idx
	return &pb.ACLTokenSecretResponse{Token: tokenView(tok), SecretId: secret, Meta: &pb.WriteMeta{Index: idx}}, nil
}

// TokenUpdate changes a token's name and policies; its secret, type and
// expiry stay.
func (e *aclEndpoint) TokenUpdate(ctx context.Context, req *pb.ACLTokenUpdateRequest) (*pb.ACLTokenGetResponse, error) {
	if err := e.enabled(); err != nil {
		return nil, err
	}
	tok, err := e.token(req.GetAccessorId())
	if err != nil {
		return nil, err
	}
	policies := dedupe(req.GetPolicies())
	if err := e.checkTokenPolicies(tok.GetType(), policies); err != nil {
		return nil, err
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	idx, err := e.s.Apply(ctx, fsm.ACLTokenUpsert, &pb.ACLTokenUpsertCommand{Tokens: []*pb.ACLToken{
		{AccessorId: tok.GetAccessorId(), Name: req.GetName(), Policies: policies}}})
	if err != nil {
		return nil, fmt.Errorf("updating token %s: %w", tok.GetAccessorId(), err)
	}
	updated, err := e.s.State().ACLToken(nil, tok.GetAccessorId())
	if err != nil || updated == nil {
		return nil, fmt.Errorf("token %s: %w", tok.GetAccessorId(), ErrACLTokenNotFound)
	}
	return &pb.ACLTokenGetResponse{Token: tokenView(updated), Meta: e.s.QueryMeta(idx)}, nil
}

// TokenDelete deletes a token by accessor ID.
func (e *aclEndpoint) TokenDelete(ctx context.Context, req *pb.ACLTokenDeleteRequest) (*pb.ACLWriteResponse, error) {
	if err := e.enabled(); err != nil {
		return nil, err
	}
	tok, err := e.token(req.GetAccessorId())
	if err != nil {
		return nil, err
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	idx, err := e.s.Apply(ctx, fsm.ACLTokenDelete, &pb.ACLTokenDeleteCommand{AccessorIds: []string{tok.GetAccessorId()}})
	if err != nil {
		return nil, fmt.Errorf("deleting token %s: %w", tok.GetAccessorId(), err)
	}
	return &pb.ACLWriteResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}

func (e *aclEndpoint) token(accessor string) (*pb.ACLToken, error) {
	tok, err := e.s.State().ACLToken(nil, accessor)
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, fmt.Errorf("token %q: %w", accessor, ErrACLTokenNotFound)
	}
	return tok, nil
}

// TokenGet reads one token (never its secret).
func (e *aclEndpoint) TokenGet(ctx context.Context, req *pb.ACLTokenGetRequest) (*pb.ACLTokenGetResponse, error) {
	if err := e.enabled(); err != nil {
		return nil, err
	}
	resp := &pb.ACLTokenGetResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		t, err := st.ACLToken(ws, req.GetAccessorId())
		if err != nil {
			return 0, err
		}
		resp.Token = nil
		if t != nil {
			resp.Token = tokenView(t)
		}
		return st.Index(fsm.TableACLTokens)
	})
	if err != nil {
		return nil, err
	}
	if resp.Token == nil {
		return nil, fmt.Errorf("token %q: %w", req.GetAccessorId(), ErrACLTokenNotFound)
	}
	resp.Meta = meta
	return resp, nil
}

// TokenList lists every token by accessor ID.
func (e *aclEndpoint) TokenList(ctx context.Context, req *pb.ACLTokenListRequest) (*pb.ACLTokenListResponse, error) {
	if err := e.enabled(); err != nil {
		return nil, err
	}
	resp := &pb.ACLTokenListResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		ts, err := st.ACLTokens(ws)
		if err != nil {
			return 0, err
		}
		resp.Tokens = resp.Tokens[:0]
		for _, t := range ts {
			resp.Tokens = append(resp.Tokens, tokenView(t))
		}
		return st.Index(fsm.TableACLTokens)
	})
	if err != nil {
		return nil, err
	}
	resp.Meta = meta
	return resp, nil
}

// TokenSelf answers the token the call carries: Unauthenticated for none,
// an unknown or an expired one.
func (e *aclEndpoint) TokenSelf(ctx context.Context, _ *pb.ACLTokenSelfRequest) (*pb.ACLTokenGetResponse, error) {
	if err := e.enabled(); err != nil {
		return nil, err
	}
	secret, err := authz.SecretOf(ctx)
	if err != nil {
		return nil, err
	}
	if secret == "" {
		return nil, fmt.Errorf("%w: the call carries no token", acl.ErrTokenNotFound)
	}
	c, err := e.s.ACL.Resolve(secret)
	if err != nil {
		return nil, err
	}
	return &pb.ACLTokenGetResponse{Token: tokenView(c.Token), Meta: e.s.QueryMeta(c.Token.GetModifyIndex())}, nil
}

// Authorize checks the call's token against a need for the agent's HTTP
// router; with ACL disabled on this server everything is allowed.
func (e *aclEndpoint) Authorize(ctx context.Context, req *pb.ACLAuthorizeRequest) (*pb.ACLAuthorizeResponse, error) {
	if !e.s.ACLEnabled {
		return &pb.ACLAuthorizeResponse{}, nil
	}
	need, err := authz.NeedOf(req)
	if err != nil {
		return nil, err
	}
	caller, err := e.s.ACL.Authorize(ctx, need, nil)
	if err != nil {
		if authz.Denied(err) {
			e.s.Logger.Warn("HTTP request refused by ACL", "accessor_id", caller.Accessor(), "need", need.String(), "error", err)
		}
		return nil, err
	}
	return &pb.ACLAuthorizeResponse{AccessorId: caller.Token.GetAccessorId(), ExpirationTime: caller.Token.GetExpirationTime()}, nil
}

// tokenView is a token as the API shows it: no secret, no hash.
func tokenView(t *pb.ACLToken) *pb.ACLTokenView {
	return &pb.ACLTokenView{AccessorId: t.GetAccessorId(), Name: t.GetName(), Type: t.GetType(), Policies: t.GetPolicies(),
		CreateTime: t.GetCreateTime(), ExpirationTime: t.GetExpirationTime(), CreateIndex: t.GetCreateIndex(), ModifyIndex: t.GetModifyIndex()}
}

func dedupe(names []string) []string {
	var out []string
	for _, n := range names {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
