package acl

import (
	"errors"
	"net/http"
	"testing"

	"berth.dev/berth/internal/hclsrc"
)

// FuzzParse checks that Parse never panics, that every error it returns
// has a position and one of the package's kinds, and that an accepted
// policy holds only known dispositions and capabilities.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`job { policy = "read" capabilities = ["submit-job"] }`,
		`volume { capabilities = ["csi-mount-volume", "deny"] } plugin { policy = "list" }`,
		"node { policy = \"write\" }\noperator { policy = \"deny\" }\nagent { capabilities = [\"read\"] }",
		`job { policy = 1 } job {}`,
		`{"job": {"policy": "write"}}`,
		"job { capabilities = [\"${x}\", 2] }",
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(`{"volume": {"capabilities": ["csi-read-volume"]}}`), true)
	f.Fuzz(func(t *testing.T, src []byte, isJSON bool) {
		name := "p.hcl"
		if isJSON {
			name = "p.json"
		}
		p, err := Parse(name, src)
		if err != nil {
			var es hclsrc.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v is not hclsrc.Errors", err, err)
			}
			for _, e := range es {
				if !e.Pos.IsValid() {
					t.Errorf("error without a position: %v", e)
				}
				if !errors.Is(e, ErrSyntax) && !errors.Is(e, ErrUnknownKey) && !errors.Is(e, ErrWrongType) && !errors.Is(e, ErrInvalidPolicy) {
					t.Errorf("error of no kind: %v", e)
				}
			}
			return
		}
		for r, rule := range p.Rules {
			if rule.Policy == "" && len(rule.Capabilities) == 0 {
				t.Errorf("%s: empty rule accepted", r)
			}
			for _, c := range rule.Capabilities {
				if c != Deny && !Known(r, c) {
					t.Errorf("%s: unknown capability %q accepted", r, c)
				}
			}
		}
		New(p)
	})
}

// FuzzFromHeader checks that FromHeader never panics and returns either
// nothing, a well-formed secret, or ErrBadTokenHeader.
func FuzzFromHeader(f *testing.F) {
	f.Add("", "")
	f.Add("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "")
	f.Add("", "Bearer 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	f.Add("x", "Basic y")
	f.Fuzz(func(t *testing.T, token, auth string) {
		h := http.Header{}
		if token != "" {
			h.Set(TokenHeader, token)
		}
		if auth != "" {
			h.Set(AuthHeader, auth)
		}
		s, err := FromHeader(h)
		switch {
		case err != nil && !errors.Is(err, ErrBadTokenHeader):
			t.Fatalf("error of another kind: %v", err)
		case err == nil && s != "" && !ValidSecret(s):
			t.Fatalf("accepted %q", s)
		}
	})
}
