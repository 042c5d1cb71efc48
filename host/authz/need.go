package authz

import (
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/acl"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// Kind is what sort of caller a route or method needs.
type Kind int

// Kinds of need; see the package doc.
const (
	None Kind = iota + 1
	Token
	Node
	Server
	Capability
	// Management needs a management token: managing ACL policies and
	// tokens (Nomad's rule), which no policy can grant, so no token can
	// mint one more powerful than itself.
	Management
)

// Need is what a route or method needs of its caller.
type Need struct {
	Kind       Kind
	Resource   acl.Resource
	Capability acl.Capability
}

func need(r acl.Resource, c acl.Capability) Need {
	return Need{Kind: Capability, Resource: r, Capability: c}
}

// Needs is a capability need of c on r.
func Needs(r acl.Resource, c acl.Capability) Need { return need(r, c) }

func (n Need) String() string {
	switch n.Kind {
	case None:
		return "none"
	case Token:
		return "token"
	case Node:
		return "node"
	case Server:
		return "server"
	case Capability:
		return fmt.Sprintf("%s:%s", n.Resource, n.Capability)
	case Management:
		return "management"
	}
	return "undeclared"
}

// Method returns what the gRPC method (its full name) needs; false when
// the table does not declare it, which callers refuse.
func Method(fullMethod string) (Need, bool) {
	n, ok := table[fullMethod]
	return n, ok
}

// Route returns what an HTTP method on a route pattern ("/v1/job/{id}")
// needs; false when the table does not declare it.
func Route(method, pattern string) (Need, bool) {
	n, ok := table[method+" "+pattern]
	return n, ok
}

// Check decides n for a caller whose ACL is a (nil: no token and no
// anonymous policy). Checked needs are Token, Capability and Management; the others
// pass (their callers are secured elsewhere). It returns nil or an error
// wrapping acl.ErrPermissionDenied naming what is missing.
func Check(n Need, a *acl.ACL, hasToken bool) error {
	switch n.Kind {
	case None, Node, Server:
		return nil
	case Token:
		if hasToken {
			return nil
		}
		return fmt.Errorf("%w: this call needs a token", acl.ErrPermissionDenied)
	case Capability:
		return a.Check(n.Resource, n.Capability)
	case Management:
		if a.IsManagement() {
			return nil
		}
		return &acl.DeniedError{Management: true}
	}
	return fmt.Errorf("%w: the call declares no need", acl.ErrPermissionDenied)
}

// ErrUndeclared is returned for a route or method the table does not
// declare: refused, whatever the token.
var ErrUndeclared = errcode.New(codes.PermissionDenied, "permission denied: the call is missing from the authorization table")

// NeedOf is the need an ACL.Authorize request asks about: "token",
// "management" or a known capability on a resource.
func NeedOf(req *pb.ACLAuthorizeRequest) (Need, error) {
	switch req.GetKind() {
	case "token":
		return Need{Kind: Token}, nil
	case "management":
		return Need{Kind: Management}, nil
	case "capability":
		r, c := acl.Resource(req.GetResource()), acl.Capability(req.GetCapability())
		if !slices.Contains(acl.Resources, r) || !acl.Known(r, c) {
			return Need{}, fmt.Errorf("%w: authorize: unknown capability %q on %q", ErrBadNeed, c, r)
		}
		return Needs(r, c), nil
	}
	return Need{}, fmt.Errorf("%w: authorize: unknown need kind %q", ErrBadNeed, req.GetKind())
}

// ErrBadNeed is returned by NeedOf for a need the table cannot hold.
var ErrBadNeed = errcode.New(codes.InvalidArgument, "invalid authorization need")
