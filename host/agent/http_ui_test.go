package agent

import (
	"net/http"
	"strings"
	"testing"

	"berth.dev/berth/host/ui"
)

// isUIRoute reports whether a route pattern is the web UI's (host/ui).
func isUIRoute(pattern string) bool {
	return pattern == "/{$}" || strings.HasPrefix(pattern, "/ui/")
}

// TestUIReadsWithThePageToken: with ACL on, a UI page needs nothing
// itself, and shows what the API shows the page request's token: with
// none, the API's 403 naming the capability of the read behind the page;
// with a management token the data, and a 404 for an unknown volume. Every
// answer carries the UI's security headers.
func TestUIReadsWithThePageToken(t *testing.T) {
	a := aclAgent(t)
	r := doToken(t, a, "", "PUT", "/v1/acl/bootstrap", nil)
	if r.status != http.StatusOK {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}
	var boot struct {
		SecretID string `json:"secret_id"`
	}
	r.decode(t, &boot)

	header := func(what string, r reply) {
		t.Helper()
		if r.header.Get("Content-Security-Policy") != ui.ContentSecurityPolicy || r.header.Get("X-Frame-Options") != "DENY" || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: security headers %v", what, r.header)
		}
	}
	for path, capability := range map[string]string{
		"/ui/volumes/v1?fragment=main": "csi-read-volume",
		"/ui/volumes":                  "csi-list-volume",
		"/ui/jobs":                     "list-jobs",
		"/ui/nodes?fragment=main":      "node",
		"/ui/plugins":                  "plugin",
	} {
		r := doToken(t, a, "", "GET", path, nil)
		if r.status != http.StatusForbidden || !strings.Contains(string(r.body), "permission_denied") || !strings.Contains(string(r.body), capability) {
			t.Errorf("GET %s without a token: %d, want 403 permission_denied naming %s:\n%s", path, r.status, capability, r.body)
		}
		header(path, r)
	}
	// The overview is parts: each shows its own refusal.
	r = doToken(t, a, "", "GET", "/ui/", nil)
	if r.status != http.StatusOK || strings.Count(string(r.body), "permission_denied") < 4 {
		t.Errorf("overview without a token: %d\n%s", r.status, r.body)
	}

	r = doToken(t, a, boot.SecretID, "GET", "/ui/nodes?fragment=main", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), a.Client().NodeID()) {
		t.Errorf("nodes with a management token: %d, want the node %s:\n%s", r.status, a.Client().NodeID(), r.body)
	}
	header("nodes", r)
	r = doToken(t, a, boot.SecretID, "GET", "/ui/volumes/nope", nil)
	if r.status != http.StatusNotFound || !strings.Contains(string(r.body), "not_found") {
		t.Errorf("an unknown volume with a management token: %d\n%s", r.status, r.body)
	}
	r = doToken(t, a, "", "GET", "/", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `<main id="main"`) {
		t.Errorf("GET / (redirected to /ui/): %d", r.status)
	}
}
