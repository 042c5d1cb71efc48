package agent

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// callHeader is call with request headers (a browser's).
func callHeader(t *testing.T, base, method, path, body string, hdr map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// TestCrossSiteWritesRefused: a write a web page on another site makes
// (the no-preflight kind: a POST of text/plain, or any write whose
// Origin or Sec-Fetch-Site gives it away) is refused 403 and never
// reaches the servers; the same write from the agent's own pages, or from
// a client that is not a browser (the CLI), is served.
func TestCrossSiteWritesRefused(t *testing.T) {
	f := newFakeServers(t)
	const path, body = "/v1/node/n1/eligibility", `{"eligibility":"ineligible"}`
	for name, hdr := range map[string]map[string]string{
		"Sec-Fetch-Site cross-site": {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
		"Sec-Fetch-Site same-site":  {"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"},
		"a foreign Origin":          {"Origin": "https://evil.example", "Content-Type": "text/plain"},
		"a foreign Origin, JSON":    {"Origin": "https://evil.example", "Content-Type": "application/json"},
	} {
		t.Run(name, func(t *testing.T) {
			r := callHeader(t, f.url, "POST", path, body, hdr)
			r.wantError(t, http.StatusForbidden, "cross_origin_refused", "cross-origin request refused")
		})
	}
	r := callHeader(t, f.url, "POST", "/v1/jobs", `{"job":{"id":"x"}}`, map[string]string{"Sec-Fetch-Site": "cross-site"})
	r.wantError(t, http.StatusForbidden, "cross_origin_refused", "POST /v1/jobs")
	if n := len(f.state.requests("NodeOps.UpdateEligibility")); n != 0 {
		t.Fatalf("%d cross-site eligibility writes reached the servers, want 0", n)
	}

	// The agent's own page (same origin), and the CLI (no browser headers).
	callHeader(t, f.url, "PUT", path, body, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": f.url, "Content-Type": "application/json"}).wantOK(t, nil)
	callHeader(t, f.url, "PUT", path, body, nil).wantOK(t, nil)
	if n := len(f.state.requests("NodeOps.UpdateEligibility")); n != 2 {
		t.Fatalf("%d eligibility writes reached the servers, want 2", n)
	}
	// Reads from anywhere still answer (a GET is safe), and no answer
	// may be sniffed as another type (a script).
	r = callHeader(t, f.url, "GET", "/v1/jobs", "", map[string]string{"Sec-Fetch-Site": "cross-site"})
	if r.status != http.StatusOK {
		t.Fatalf("cross-site GET /v1/jobs: %d %s", r.status, r.body)
	}
	for _, r := range []reply{r, callHeader(t, f.url, "GET", "/v1/no-such", "", nil)} {
		if r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("an API answer (%d) without X-Content-Type-Options: nosniff", r.status)
		}
	}
}

// TestFormBodiesRefused: a write whose body is not JSON (what an HTML form
// sends, from any browser, with or without the headers above) is refused
// 415 before it is read; JSON or no Content-Type is served.
func TestFormBodiesRefused(t *testing.T) {
	f := newFakeServers(t)
	const path, body = "/v1/node/n1/eligibility", `{"eligibility":"ineligible"}`
	for _, ct := range []string{"text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "bogus/"} {
		// A browser's form, even from the agent's own origin.
		r := callHeader(t, f.url, "POST", path, body, map[string]string{"Content-Type": ct, "Sec-Fetch-Site": "same-origin"})
		r.wantError(t, http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type: application/json")
		r = callHeader(t, f.url, "POST", path, body, map[string]string{"Content-Type": ct, "Origin": f.url})
		r.wantError(t, http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type: application/json")
	}
	if n := len(f.state.requests("NodeOps.UpdateEligibility")); n != 0 {
		t.Fatalf("%d form writes reached the servers, want 0", n)
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/merge-patch+json"} {
		callHeader(t, f.url, "POST", path, body, map[string]string{"Content-Type": ct, "Sec-Fetch-Site": "same-origin"}).wantOK(t, nil)
	}
	// Not a browser (neither header): `curl -d @body.json` labels JSON as
	// a form, and is served.
	callHeader(t, f.url, "POST", path, body, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}).wantOK(t, nil)
	if n := len(f.state.requests("NodeOps.UpdateEligibility")); n != 4 {
		t.Fatalf("%d writes reached the servers, want the 4 JSON ones", n)
	}
	// A write that reads no body is not a form's either way when it has none.
	callHeader(t, f.url, "PUT", "/v1/node/n1/fence", "", nil).wantOK(t, nil)
}

// TestLoopbackHostAllowList: an agent bound to loopback answers only a
// Host naming loopback, so a page whose name was rebound to 127.0.0.1
// (DNS rebinding: same-origin to the browser) gets nothing; an agent bound
// elsewhere takes any Host.
func TestLoopbackHostAllowList(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv := httptest.NewServer(guardHTTP(ok, true))
	t.Cleanup(srv.Close)
	for _, host := range []string{"evil.example", "evil.example:7646", "127.0.0.1.nip.io", "10.0.0.1:7646", "localhost.evil.example"} {
		r := callHeader(t, srv.URL, "GET", "/v1/nodes", "", map[string]string{"Host": host})
		r.wantError(t, http.StatusForbidden, "host_refused", "listens on loopback")
	}
	for _, host := range []string{"", "localhost", "localhost:7646", "LOCALHOST.", "berth.localhost:7646", "127.0.0.1:7646", "127.1.2.3", "[::1]:7646"} {
		req := httptest.NewRequest("GET", "/v1/nodes", nil)
		req.Host = host
		w := httptest.NewRecorder()
		guardHTTP(ok, true).ServeHTTP(w, req)
		if w.Code != http.StatusNoContent {
			t.Errorf("Host %q: %d %s, want served", host, w.Code, w.Body)
		}
	}
	w := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/v1/nodes", nil)
	req.Host = "berth.example.com"
	guardHTTP(ok, false).ServeHTTP(w, req)
	if w.Code != http.StatusNoContent {
		t.Errorf("not on loopback, Host berth.example.com: %d, want served", w.Code)
	}
}
