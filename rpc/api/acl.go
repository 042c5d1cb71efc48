package api

import (
	"context"
	"net/http"
	"net/url"

	"berth.dev/berth/rpc/pb"
)

// SetToken makes the client send secret as its ACL token (X-Berth-Token)
// instead of BERTH_TOKEN's; "" sends none.
func (c *Client) SetToken(secret string) { c.token = secret }

// ACL manages the cluster's ACL: bootstrap, policies and tokens.
type ACL struct{ c *Client }

// ACL returns the ACL endpoints.
func (c *Client) ACL() *ACL { return &ACL{c} }

// Bootstrap makes the cluster's first management token, answering its
// secret; it succeeds once (see the README's reset procedure).
func (a *ACL) Bootstrap(ctx context.Context) (*pb.ACLTokenSecretResponse, error) {
	out := &pb.ACLTokenSecretResponse{}
	return out, a.c.write(ctx, http.MethodPut, "/v1/acl/bootstrap", nil, nil, out)
}

// PolicyApply creates or replaces the policy called name with rules (HCL).
func (a *ACL) PolicyApply(ctx context.Context, name, description, rules string) (*pb.ACLWriteResponse, error) {
	out := &pb.ACLWriteResponse{}
	in := &pb.ACLPolicy{Name: name, Description: description, Rules: rules}
	return out, a.c.write(ctx, http.MethodPut, "/v1/acl/policy/"+url.PathEscape(name), nil, in, out)
}

// Policies lists the policies by name.
func (a *ACL) Policies(ctx context.Context, q *QueryOptions) ([]*pb.ACLPolicy, *QueryMeta, error) {
	return getList(ctx, a.c, "/v1/acl/policies", q, func() *pb.ACLPolicy { return &pb.ACLPolicy{} })
}

// Policy reads one policy.
func (a *ACL) Policy(ctx context.Context, name string, q *QueryOptions) (*pb.ACLPolicy, *QueryMeta, error) {
	out := &pb.ACLPolicy{}
	meta, err := a.c.getJSON(ctx, "/v1/acl/policy/"+url.PathEscape(name), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// PolicyDelete deletes a policy.
func (a *ACL) PolicyDelete(ctx context.Context, name string) (*pb.ACLWriteResponse, error) {
	out := &pb.ACLWriteResponse{}
	return out, a.c.write(ctx, http.MethodDelete, "/v1/acl/policy/"+url.PathEscape(name), nil, nil, out)
}

// TokenCreate makes a token, answering its secret this once.
func (a *ACL) TokenCreate(ctx context.Context, req *pb.ACLTokenCreateRequest) (*pb.ACLTokenSecretResponse, error) {
	out := &pb.ACLTokenSecretResponse{}
	return out, a.c.write(ctx, http.MethodPut, "/v1/acl/tokens", nil, req, out)
}

// Tokens lists the tokens by accessor ID (never their secrets).
func (a *ACL) Tokens(ctx context.Context, q *QueryOptions) ([]*pb.ACLTokenView, *QueryMeta, error) {
	return getList(ctx, a.c, "/v1/acl/tokens", q, func() *pb.ACLTokenView { return &pb.ACLTokenView{} })
}

// Token reads one token by accessor ID.
func (a *ACL) Token(ctx context.Context, accessor string, q *QueryOptions) (*pb.ACLTokenView, *QueryMeta, error) {
	out := &pb.ACLTokenView{}
	meta, err := a.c.getJSON(ctx, "/v1/acl/token/"+url.PathEscape(accessor), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// TokenUpdate changes a token's name and policies.
func (a *ACL) TokenUpdate(ctx context.Context, req *pb.ACLTokenUpdateRequest) (*pb.ACLTokenView, error) {
	out := &pb.ACLTokenView{}
	return out, a.c.write(ctx, http.MethodPut, "/v1/acl/token/"+url.PathEscape(req.GetAccessorId()), nil, req, out)
}

// TokenDelete deletes a token by accessor ID.
func (a *ACL) TokenDelete(ctx context.Context, accessor string) (*pb.ACLWriteResponse, error) {
	out := &pb.ACLWriteResponse{}
	return out, a.c.write(ctx, http.MethodDelete, "/v1/acl/token/"+url.PathEscape(accessor), nil, nil, out)
}

// TokenSelf reads the token the client sends.
func (a *ACL) TokenSelf(ctx context.Context) (*pb.ACLTokenView, error) {
	out := &pb.ACLTokenView{}
	_, err := a.c.getJSON(ctx, "/v1/acl/token/self", nil, out)
	return out, err
}
