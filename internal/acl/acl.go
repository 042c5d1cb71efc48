package acl

import "fmt"

// AnonymousPolicy is the name of the policy that governs requests made
// without a token.
const AnonymousPolicy = "anonymous"

// ACL is what a token may do: the merge of its policies' rules, or
// everything for a management token. The zero ACL allows nothing.
type ACL struct {
	management bool
	grants     map[Resource]map[Capability]bool
}

// Management returns the ACL of a management token: everything allowed.
func Management() *ACL { return &ACL{management: true} }

// New merges policies into one ACL. On each resource the capabilities of
// every rule add up, and a deny in any rule — policy "deny" or capability
// "deny" — takes all of that resource's capabilities away, whatever the
// other rules grant.
func New(policies ...*Policy) *ACL {
	a := &ACL{grants: map[Resource]map[Capability]bool{}}
	denied := map[Resource]bool{}
	for _, p := range policies {
		if p == nil {
			continue
		}
		for r, rule := range p.Rules {
			caps := specs[r].expand[rule.Policy]
			if rule.Policy == Deny {
				denied[r] = true
			}
			for _, c := range rule.Capabilities {
				if c == Deny {
					denied[r] = true
				}
			}
			caps = append(caps[:len(caps):len(caps)], rule.Capabilities...)
			for _, c := range caps {
				if a.grants[r] == nil {
					a.grants[r] = map[Capability]bool{}
				}
				a.grants[r][c] = true
			}
		}
	}
	for r := range denied {
		delete(a.grants, r)
	}
	return a
}

// IsManagement reports whether a is a management token's ACL.
func (a *ACL) IsManagement() bool { return a != nil && a.management }

// Allows reports whether a grants capability c on resource r.
func (a *ACL) Allows(r Resource, c Capability) bool {
	if a == nil {
		return false
	}
	return a.management || a.grants[r][c]
}

// Check returns nil when a allows c on r, else ErrPermissionDenied naming
// what is missing.
func (a *ACL) Check(r Resource, c Capability) error {
	if a.Allows(r, c) {
		return nil
	}
	return &DeniedError{Resource: r, Capability: c}
}

// DeniedError is a refusal that names what is missing. It wraps
// ErrPermissionDenied.
type DeniedError struct {
	Resource   Resource
	Capability Capability
	// Management is set when only a management token may do it.
	Management bool
}

func (e *DeniedError) Error() string {
	if e.Management {
		return "permission denied: a management token is required"
	}
	return fmt.Sprintf("permission denied: capability %q on %s is required", e.Capability, e.Resource)
}

// Unwrap returns ErrPermissionDenied.
func (e *DeniedError) Unwrap() error { return ErrPermissionDenied }
