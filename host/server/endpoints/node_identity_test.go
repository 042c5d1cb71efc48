package endpoints

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
)

func TestNodeIdentitySentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrNodeSecret:          codes.PermissionDenied,
		ErrNodeSecretLost:      codes.PermissionDenied,
		ErrMalformedNodeSecret: codes.InvalidArgument,
		ErrNodeUnauthenticated: codes.PermissionDenied,
	})
}

func TestNodeIdentityEnforcementValues(t *testing.T) {
	for _, v := range []string{"", EnforceWarn, EnforceStrict} {
		if err := CheckEnforcement(v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	if _, err := NewNodeIdentity("loose", nil, nil, nil); err == nil || !strings.Contains(err.Error(), `"loose"`) {
		t.Errorf("NewNodeIdentity(loose) = %v, want an error naming the value", err)
	}
}

// A secret is 256 random bits (64 hex digits), never the same twice, and
// only its SHA-256 matches it.
func TestNodeSecretsAreRandomAndMatchOnlyTheirHash(t *testing.T) {
	a, err := rpc.NewNodeSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, err := rpc.NewNodeSecret()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 2*rpc.NodeSecretBytes || a == b || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("secrets %q, %q", a, b)
	}
	h := HashNodeSecret(a)
	if !secretMatches(a, h) || secretMatches(b, h) || secretMatches("", h) || secretMatches(a, nil) {
		t.Fatal("a secret matches a hash other than its own, or not its own")
	}
}
