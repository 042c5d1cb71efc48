package agent

import (
	"net/http"
	"testing"
)

// TestHostileInputWithACL runs the hostile pass against an agent with ACL
// enabled: with the management token every request reaches its handler
// (no 5xx, nothing hangs, the heap comes back); without a token (the
// anonymous policy, none applied) every route that needs one is refused
// with 401/403 before its body is read, the oversized body included.
func TestHostileInputWithACL(t *testing.T) {
	a := aclAgent(t)
	var boot struct {
		SecretID string `json:"secret_id"`
	}
	r := doToken(t, a, "", "PUT", "/v1/acl/bootstrap", nil)
	if r.status != http.StatusOK {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}
	r.decode(t, &boot)
	t.Run("management token", func(t *testing.T) { hostilePass(t, a, boot.SecretID) })
	t.Run("no token", func(t *testing.T) { hostilePass(t, a, "") })
}
