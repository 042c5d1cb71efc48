package agent

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"berth.dev/berth/host/ui"
)

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

	// Behind a reverse proxy with HTTP Basic auth the browser sends
	// Authorization: Basic with every request, the UI's own API calls
	// (its actions, followed logs) too: every route ignores it (the token
	// is X-Berth-Token), as Nomad's do.
	basicDo := func(method, path, secret string) reply {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+a.HTTPAddr()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("operator", "proxy-password")
		if secret != "" {
			req.Header.Set("X-Berth-Token", secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return reply{resp.StatusCode, resp.Header, b}
	}
	basic := func(path, secret string) reply { t.Helper(); return basicDo("GET", path, secret) }
	if r := basic("/ui/nodes?fragment=main", boot.SecretID); r.status != http.StatusOK || !strings.Contains(string(r.body), a.Client().NodeID()) {
		t.Errorf("a UI page with Basic auth and a token: %d, want the node:\n%s", r.status, r.body)
	}
	if r := basic("/ui/nodes", ""); r.status != http.StatusForbidden || !strings.Contains(string(r.body), "Permission denied") {
		t.Errorf("a UI page with Basic auth and no token: %d, want the page's 403:\n%s", r.status, r.body)
	}
	if r := basic("/v1/nodes", boot.SecretID); r.status != http.StatusOK || !strings.Contains(string(r.body), a.Client().NodeID()) {
		t.Errorf("an API read with Basic auth and a token: %d, want the node:\n%s", r.status, r.body)
	}
	if r := basicDo("PUT", "/v1/system/gc", boot.SecretID); r.status != http.StatusOK {
		t.Errorf("an API write with Basic auth and a token: %d, want it done:\n%s", r.status, r.body)
	}
	if r := basicDo("PUT", "/v1/system/gc", ""); r.status != http.StatusForbidden {
		t.Errorf("an API write with Basic auth and no token: %d, want 403 (anonymous):\n%s", r.status, r.body)
	}
}
