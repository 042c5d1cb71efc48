package ui

import (
	"os"
	"strings"
	"testing"
)

// TestDocsQuoteTheCSP: the README and the package doc quote the policy
// the UI sends, whole.
func TestDocsQuoteTheCSP(t *testing.T) {
	for _, f := range []string{"../../README.md", "doc.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "\n//", "\n")), " ")
		if !strings.Contains(text, ContentSecurityPolicy) {
			t.Errorf("%s does not quote the policy the UI sends: %s", f, ContentSecurityPolicy)
		}
	}
}
