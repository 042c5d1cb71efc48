package agent

import (
	"context"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"berth.dev/berth/host/authz"
	"berth.dev/berth/internal/acl"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// authorizeHTTP decides a request from its route's need in the one table
// (host/authz), before its body is read. The token (X-Berth-Token or
// Authorization: Bearer) goes on to the servers with every RPC the handler
// makes, which check it again. An Authorization of another scheme (a
// reverse proxy's Basic, which the browser sends with every request, the
// UI's own API calls too) is ignored on every route, as Nomad does. With
// ACL disabled nothing is checked, and a token is passed on only when
// well formed.
func (a *Agent) authorizeHTTP(r *http.Request, pattern string) (*http.Request, error) {
	secret, err := acl.FromPageHeader(r.Header)
	if a.cfg == nil || !a.cfg.ACL.Enabled {
		if err == nil && secret != "" {
			r = r.WithContext(metadata.AppendToOutgoingContext(r.Context(), rpc.TokenKey, secret))
		}
		return r, nil
	}
	if err != nil {
		return r, err
	}
	need, ok := authz.Route(r.Method, pattern)
	if !ok {
		a.logger.Error("HTTP route missing from the authorization table: refused", "method", r.Method, "route", pattern)
		return r, authz.ErrUndeclared
	}
	if secret != "" {
		r = r.WithContext(metadata.AppendToOutgoingContext(r.Context(), rpc.TokenKey, secret))
	}
	req := &pb.ACLAuthorizeRequest{}
	switch need.Kind {
	case authz.Token:
		req.Kind = "token"
	case authz.Management:
		req.Kind = "management"
	case authz.Capability:
		req.Kind, req.Resource, req.Capability = "capability", string(need.Resource), string(need.Capability)
	default:
		return r, nil
	}
	if a.allowed.allowed(secret, need) {
		return r, nil
	}
	var resp *pb.ACLAuthorizeResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewACLClient(c).Authorize(ctx, req)
		return err
	})
	if err == nil {
		a.allowed.allow(secret, need, resp.GetExpirationTime())
	}
	return r, err
}

func (a *Agent) handleACL(handle func(string, map[string]handlerFunc)) {
	handle("/v1/acl/bootstrap", writeMethods(a.aclBootstrap))
	handle("/v1/acl/policies", map[string]handlerFunc{"GET": a.aclPolicyList})
	handle("/v1/acl/policy/{name}", map[string]handlerFunc{"GET": a.aclPolicyGet, "PUT": a.aclPolicyApply, "POST": a.aclPolicyApply, "DELETE": a.aclPolicyDelete})
	handle("/v1/acl/tokens", map[string]handlerFunc{"GET": a.aclTokenList, "PUT": a.aclTokenCreate, "POST": a.aclTokenCreate})
	handle("/v1/acl/token/self", map[string]handlerFunc{"GET": a.aclTokenSelf})
	handle("/v1/acl/token/{accessor}", map[string]handlerFunc{"GET": a.aclTokenGet, "PUT": a.aclTokenUpdate, "POST": a.aclTokenUpdate, "DELETE": a.aclTokenDelete})
}

// aclCall makes one ACL RPC on a server.
func aclCall[T any](a *Agent, r *http.Request, fn func(context.Context, pb.ACLClient) (T, error)) (T, error) {
	var resp T
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = fn(ctx, pb.NewACLClient(c))
		return err
	})
	return resp, err
}

// aclBootstrap is PUT /v1/acl/bootstrap: the first management token, with
// its secret_id.
func (a *Agent) aclBootstrap(w http.ResponseWriter, r *http.Request) error {
	resp, err := aclCall(a, r, func(ctx context.Context, c pb.ACLClient) (*pb.ACLTokenSecretResponse, error) {
		return c.Bootstrap(ctx, &pb.ACLBootstrapRequest{})
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

func (a *Agent) aclPolicyList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	resp, err := aclCall(a, r, func(ctx context.Context, c pb.ACLClient) (*pb.ACLPolicyListResponse, error) {
		return c.PolicyList(ctx, &pb.ACLPolicyListRequest{Query: q})
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetPolicies())
}

func (a *Agent) aclPolicyGet(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	resp, err := aclCall(a, r, func(ctx context.Context, c pb.ACLClient) (*pb.ACLPolicyGetResponse, error) {
		return c.PolicyGet(ctx, &pb.ACLPolicyGetRequest{Name: r.PathValue("name"), Query: q})
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProto(w, resp.GetPolicy())
}

// aclPolicyApply is PUT /v1/acl/policy/{name} with a policy
// ({"description", "rules"}) as its body.
func (a *Agent) aclPolicyApply(w http.ResponseWriter, r *http.Request) error {
	p := &pb.ACLPolicy{}
	if err := decodeBody(w, r, p, false); err != nil {
		return err
	}
	if err := samePathID("name", p.GetName(), r.PathValue("name")); err != nil {
		return err
	}
	p.Name = r.PathValue("name")
	resp, err := aclCall(a, r, func(ctx context.Context, c pb.ACLClient) (*pb.ACLWriteResponse, error) {
		return c.PolicyUpsert(ctx, &pb.ACLPolicyUpsertRequest{Policy: p})
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

func (a *Agent) aclPolicyDelete(w http.ResponseWriter, r *http.Request) error {
	resp, err := aclCall(a, r, func(ctx context.Context, c pb.ACLClient) (*pb.ACLWriteResponse, error) {
		return c.PolicyDelete(ctx, &pb.ACLPolicyDeleteRequest{Name: r.PathValue("name")})
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

func (a *Agent) aclTokenList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	resp, err := aclCall(a, r, func(ctx context.Context, c pb.ACLClient) (*pb.ACLTokenListResponse, error) {
		return c.TokenList(ctx, &pb.ACLTokenListRequest{Query: q})
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetTokens())
}

// aclTokenCreate is PUT /v1/acl/tokens with {"name", "type", "policies",
// "ttl_ms"}: the token with its secret_id, answered this once.
func (a *Agent) aclTokenCreate(w http.ResponseWriter, r *http.Request) error {
	req := &pb.ACLTokenCreateRequest{}
	if err := decodeBody(w, r, req, false); err != nil {
		return err
	}
	resp, err := aclCall(a, r, func(ctx context.Context, c pb.ACLClient) (*pb.ACLTokenSecretResponse, error) {
		return c.TokenCreate(ctx, req)
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

func (a *Agent) aclTokenSelf(w http.ResponseWriter, r *http.Request) error {
	resp, err := aclCall(a, r, func(ctx context.Context, c pb.ACLClient) (*pb.ACLTokenGetResponse, error) {
		return c.TokenSelf(ctx, &pb.ACLTokenSelfRequest{})
	})
	if err != nil {
		return err
	}
	return writeProto(w, resp.GetToken())
}

func (a *Agent) aclTokenGet(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	resp, err := aclCall(a, r, func(ctx context.Context, c pb.ACLClient) (*pb.ACLTokenGetResponse, error) {
		return c.TokenGet(ctx, &pb.ACLTokenGetRequest{AccessorId: r.PathValue("accessor"), Query: q})
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProto(w, resp.GetToken())
}

// aclTokenUpdate is PUT /v1/acl/token/{accessor} with {"name",
// "policies"}.
func (a *Agent) aclTokenUpdate(w http.ResponseWriter, r *http.Request) error {
	req := &pb.ACLTokenUpdateRequest{}
	if err := decodeBody(w, r, req, false); err != nil {
		return err
	}
	if err := samePathID("accessor_id", req.GetAccessorId(), r.PathValue("accessor")); err != nil {
		return err
	}
	req.AccessorId = r.PathValue("accessor")
	resp, err := aclCall(a, r, func(ctx context.Context, c pb.ACLClient) (*pb.ACLTokenGetResponse, error) {
		return c.TokenUpdate(ctx, req)
	})
	if err != nil {
		return err
	}
	return writeProto(w, resp.GetToken())
}

func (a *Agent) aclTokenDelete(w http.ResponseWriter, r *http.Request) error {
	resp, err := aclCall(a, r, func(ctx context.Context, c pb.ACLClient) (*pb.ACLWriteResponse, error) {
		return c.TokenDelete(ctx, &pb.ACLTokenDeleteRequest{AccessorId: r.PathValue("accessor")})
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}
