package rpc

import (
	"encoding/hex"
	"strings"
	"testing"
)

func TestNodeSecretsAreWellFormedAndDistinct(t *testing.T) {
	a, err := NewNodeSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewNodeSecret()
	if err != nil {
		t.Fatal(err)
	}
	if a == b || !WellFormedNodeSecret(a) || !WellFormedNodeSecret(b) {
		t.Fatalf("secrets %q, %q", a, b)
	}
	for _, bad := range []string{"", "short", strings.ToUpper(a), a + "0", a[:63] + "g", a[:63] + " "} {
		if WellFormedNodeSecret(bad) {
			t.Errorf("%q passes as a secret", bad)
		}
	}
}

// FuzzWellFormedNodeSecret: the check of a secret a client presents (gRPC
// metadata, outside input) accepts exactly the 64 lowercase hex digits
// that decode to 32 bytes.
func FuzzWellFormedNodeSecret(f *testing.F) {
	f.Add(strings.Repeat("ab", 32))
	f.Add("")
	f.Add(strings.Repeat("AB", 32))
	f.Add(strings.Repeat("\xff", 64))
	f.Fuzz(func(t *testing.T, s string) {
		b, err := hex.DecodeString(s)
		want := err == nil && len(b) == NodeSecretBytes && strings.ToLower(s) == s
		if got := WellFormedNodeSecret(s); got != want {
			t.Fatalf("WellFormedNodeSecret(%q) = %v, want %v", s, got, want)
		}
	})
}
