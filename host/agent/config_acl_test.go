package agent

import (
	"errors"
	"strings"
	"testing"
)

// TestValidateACLNeedsVerifiedServerTLS: acl.enabled is refused at its
// file:line:col unless tls.rpc and verify_server_hostname are on (the
// server-only calls carry no token; a server certificate proves them).
func TestValidateACLNeedsVerifiedServerTLS(t *testing.T) {
	ca, cert, key := writePKI(t, t.TempDir())
	withTLS := tlsConfigSrc(ca, cert, key)
	noVSH := strings.Replace(withTLS, "verify_server_hostname = true", "verify_server_hostname = false", 1)
	const plain = "name = \"a\"\ndata_dir = \"/tmp/a\"\nserver {\n  enabled = true\n  bootstrap_expect = 1\n}\n"
	for _, tc := range []struct {
		name, src, want string
	}{
		{"no tls", plain + "acl {\n  enabled = true\n}\n", "agent.hcl:8:13: acl.enabled: "},
		{"tls without verify_server_hostname", noVSH + "acl {\n  enabled = true\n}\n", "acl.enabled: "},
		{"tls with verify_server_hostname", withTLS + "acl {\n  enabled = true\n}\n", ""},
		{"acl off", plain, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("agent.hcl", []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			err = DefaultConfig().Merge(c).Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "verify_server_hostname = true") || !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("Validate: %v\nwant %q explaining verify_server_hostname", err, tc.want)
			}
		})
	}
}
