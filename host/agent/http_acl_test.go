package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/host/authz"
	"berth.dev/berth/internal/acl"
	"berth.dev/berth/internal/testutil"
)

// TestEveryHTTPRouteIsInTheAuthorizationTable walks every route the agent
// serves and fails on one that declares no need in host/authz's table.
func TestEveryHTTPRouteIsInTheAuthorizationTable(t *testing.T) {
	rt := (&Agent{logger: hclog.NewNullLogger()}).apiRouter()
	n := 0
	for pattern, methods := range rt.routes {
		for m := range methods {
			n++
			if _, ok := authz.Route(m, pattern); !ok {
				t.Errorf("%s %s declares no need in host/authz's table", m, pattern)
			}
		}
	}
	if n < 80 {
		t.Errorf("walked %d routes: the agent serves more", n)
	}
}

func aclAgent(t *testing.T) *Agent {
	t.Helper()
	cfg := DevConfig()
	cfg.Ports = Ports{}
	cfg.ACL.Enabled = true
	a, err := New(cfg, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	testutil.WaitFor(t, 20*time.Second, func() error {
		if !a.Client().Registered() {
			return fmt.Errorf("node not registered yet")
		}
		return nil
	})
	return a
}

func doToken(t *testing.T, a *Agent, secret, method, path string, body io.Reader) reply {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+a.HTTPAddr()+path, body)
	if err != nil {
		t.Fatal(err)
	}
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

func everyResource(policy string) string {
	var b strings.Builder
	for _, r := range acl.Resources {
		fmt.Fprintf(&b, "%s { policy = %q }\n", r, policy)
	}
	return b.String()
}

// TestACLRouteTokenMatrix sends every route of the API with no token,
// under an anonymous policy, and with read, write and management tokens,
// and checks each answer against the table: refused with 403
// permission_denied naming the capability where the token's policies do
// not grant the route's need, never 401 or 403 where they do.
func TestACLRouteTokenMatrix(t *testing.T) {
	a := aclAgent(t)
	var boot struct {
		SecretID string `json:"secret_id"`
	}
	r := doToken(t, a, "", "PUT", "/v1/acl/bootstrap", nil)
	if r.status != http.StatusOK {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}
	r.decode(t, &boot)
	mgmt := boot.SecretID

	rules := map[string]string{
		"read": everyResource("read"),
		// write everywhere but operator: the operator routes (ACL
		// management, snapshots, fence) stay refused.
		"write":     strings.Replace(everyResource("write"), `operator { policy = "write" }`, `operator { policy = "read" }`, 1),
		"anonymous": "job { policy = \"read\" }\nagent { policy = \"read\" }\n",
	}
	apply := func(name string) {
		body, _ := json.Marshal(map[string]string{"rules": rules[name]})
		if r := doToken(t, a, mgmt, "PUT", "/v1/acl/policy/"+name, bytes.NewReader(body)); r.status != http.StatusOK {
			t.Fatalf("policy %s: %d %s", name, r.status, r.body)
		}
	}
	token := func(policy string) string {
		body, _ := json.Marshal(map[string]any{"name": policy, "policies": []string{policy}})
		r := doToken(t, a, mgmt, "PUT", "/v1/acl/tokens", bytes.NewReader(body))
		if r.status != http.StatusOK {
			t.Fatalf("token %s: %d %s", policy, r.status, r.body)
		}
		var out struct {
			SecretID string `json:"secret_id"`
		}
		r.decode(t, &out)
		return out.SecretID
	}
	apply("read")
	apply("write")
	readTok, writeTok := token("read"), token("write")
	parsed := func(name string) *acl.ACL {
		p, err := acl.Parse(name, []byte(rules[name]))
		if err != nil {
			t.Fatal(err)
		}
		return acl.New(p)
	}

	type route struct{ pattern, method string }
	var routes []route
	for pattern, methods := range a.apiRouter().routes {
		if isUIPage(pattern) {
			// The web UI's pages need nothing themselves and answer the
			// status of the API reads behind them (a 403 naming the
			// capability): TestUIReadsWithThePageToken checks them.
			continue
		}
		for _, m := range slices.Sorted(maps.Keys(methods)) {
			routes = append(routes, route{pattern, m})
		}
	}
	sort.Slice(routes, func(i, j int) bool { return routes[i].pattern+routes[i].method < routes[j].pattern+routes[j].method })
	fill := regexp.MustCompile(`\{[^}]*\}`)

	check := func(class, secret string, a2 *acl.ACL) {
		var allowed, refused int
		defer func() {
			t.Logf("%s: %d routes allowed, %d refused", class, allowed, refused)
			if (class != "management" && refused == 0) || allowed == 0 {
				t.Errorf("%s: %d allowed, %d refused: the matrix checks nothing", class, allowed, refused)
			}
		}()
		for _, rt := range routes {
			need, _ := authz.Route(rt.method, rt.pattern)
			want := authz.Check(need, a2, secret != "")
			path := fill.ReplaceAllString(rt.pattern, "no-such-thing")
			if rt.pattern == "/v1/acl/bootstrap" {
				path = rt.pattern // answered 409 already bootstrapped: allowed, refused later
			}
			got := doToken(t, a, secret, rt.method, path, nil)
			denied := got.status == http.StatusForbidden || got.status == http.StatusUnauthorized
			if denied {
				refused++
			} else {
				allowed++
			}
			switch {
			case want != nil && !denied:
				t.Errorf("%s: %s %s (needs %s) answered %d, want 403", class, rt.method, rt.pattern, need, got.status)
			case want != nil:
				var e struct{ Code, Message string }
				_ = json.Unmarshal(got.body, &e)
				if got.status != http.StatusForbidden || e.Code != "permission_denied" ||
					(need.Kind == authz.Capability && !strings.Contains(e.Message, string(need.Capability))) {
					t.Errorf("%s: %s %s: %d %s, want 403 permission_denied naming %s", class, rt.method, rt.pattern, got.status, got.body, need.Capability)
				}
			case denied:
				t.Errorf("%s: %s %s (needs %s) refused: %d %s", class, rt.method, rt.pattern, need, got.status, got.body)
			}
		}
	}
	check("no token", "", acl.New())
	check("read", readTok, parsed("read"))
	check("write", writeTok, parsed("write"))
	check("management", mgmt, acl.Management())
	apply("anonymous")
	testutil.WaitFor(t, 10*time.Second, func() error {
		if r := doToken(t, a, "", "GET", "/v1/jobs", nil); r.status != http.StatusOK {
			return fmt.Errorf("anonymous list: %d", r.status)
		}
		return nil
	})
	check("anonymous", "", parsed("anonymous"))

	// Hostile tokens on every checked route: 401, never a 5xx, never
	// served.
	hostile := []http.Header{
		{"X-Berth-Token": {"\xff\xfe"}},
		{"X-Berth-Token": {strings.Repeat("a", 1<<16)}},
		{"X-Berth-Token": {mgmt, readTok}},
		{"Authorization": {"Bearer"}},
		{"Authorization": {"Bearer " + readTok}, "X-Berth-Token": {mgmt}},
		{"X-Berth-Token": {strings.ToUpper(mgmt)}},
	}
	for _, rt := range routes {
		need, _ := authz.Route(rt.method, rt.pattern)
		if need.Kind == authz.None {
			continue
		}
		for i, h := range hostile {
			req, err := http.NewRequest(rt.method, "http://"+a.HTTPAddr()+fill.ReplaceAllString(rt.pattern, "no-such-thing"), nil)
			if err != nil {
				t.Fatal(err)
			}
			maps.Copy(req.Header, h)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s with hostile header %d: %d %s, want 401", rt.method, rt.pattern, i, resp.StatusCode, b)
			}
		}
	}
	if len(routes) < 80 {
		t.Fatalf("%d routes", len(routes))
	}
}

// TestACLOverHTTP: bootstrap → policy → token; a read-only token cannot
// write (403 naming the capability), a job writer without csi-mount-volume
// cannot run a job mounting a volume, an unknown or expired token is 401,
// and the decision comes before the body is read.
func TestACLOverHTTP(t *testing.T) {
	a := aclAgent(t)
	var boot struct {
		SecretID string `json:"secret_id"`
		Token    struct {
			AccessorID string `json:"accessor_id"`
			Type       string
		}
	}
	r := doToken(t, a, "", "POST", "/v1/acl/bootstrap", nil)
	r.decode(t, &boot)
	if len(boot.SecretID) != 64 || boot.Token.Type != "management" || boot.Token.AccessorID == "" {
		t.Fatalf("bootstrap: %s", r.body)
	}
	doToken(t, a, "", "POST", "/v1/acl/bootstrap", nil).wantError(t, http.StatusConflict, "failed_precondition", "already done")
	mgmt := boot.SecretID
	for name, rules := range map[string]string{"ro": `job { policy = "read" }`, "dep": `job { policy = "write" }`} {
		body, _ := json.Marshal(map[string]string{"rules": rules, "description": name})
		if r := doToken(t, a, mgmt, "PUT", "/v1/acl/policy/"+name, bytes.NewReader(body)); r.status != http.StatusOK {
			t.Fatalf("policy: %d %s", r.status, r.body)
		}
	}
	bad, _ := json.Marshal(map[string]string{"rules": "job {\n  capabilities = [\"submit-jobs\"]\n}\n"})
	doToken(t, a, mgmt, "PUT", "/v1/acl/policy/bad", bytes.NewReader(bad)).wantError(t, http.StatusBadRequest, "invalid_argument", `policy bad:2:18: job.capabilities[0]: "submit-jobs" is not a capability of job (did you mean "submit-job"?)`)
	mk := func(body string) string {
		r := doToken(t, a, mgmt, "PUT", "/v1/acl/tokens", strings.NewReader(body))
		var out struct {
			SecretID string `json:"secret_id"`
		}
		r.decode(t, &out)
		if out.SecretID == "" {
			t.Fatalf("token: %d %s", r.status, r.body)
		}
		return out.SecretID
	}
	ro := mk(`{"name": "ro", "policies": ["ro"]}`)
	dep := mk(`{"name": "dep", "policies": ["dep"]}`)
	short := mk(`{"name": "short", "policies": ["ro"], "ttl_ms": 1}`)

	if r := doToken(t, a, ro, "GET", "/v1/jobs", nil); r.status != http.StatusOK {
		t.Fatalf("read-only list: %d %s", r.status, r.body)
	}
	job := `{"job": {"id": "db", "name": "db", "type": "service", "groups": [{"name": "g", "count": 1,
		"volumes": {"data": {"name": "data", "type": "csi", "source": "vol1"}},
		"tasks": [{"name": "t", "driver": "mock", "config": {"run_for": "1h"}}]}]}}`
	doToken(t, a, ro, "PUT", "/v1/jobs", strings.NewReader(job)).wantError(t, http.StatusForbidden, "permission_denied", `capability "submit-job" on job is required`)
	doToken(t, a, dep, "PUT", "/v1/jobs", strings.NewReader(job)).wantError(t, http.StatusForbidden, "permission_denied", `capability "csi-mount-volume" on volume is required`)

	// Authorization: Bearer is the same token.
	req, _ := http.NewRequest("GET", "http://"+a.HTTPAddr()+"/v1/acl/token/self", nil)
	req.Header.Set("Authorization", "Bearer "+ro)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"name":"ro"`) && !strings.Contains(string(b), `"name": "ro"`) {
		t.Fatalf("self with a bearer token: %d %s", resp.StatusCode, b)
	}
	if strings.Contains(string(b), ro) {
		t.Fatal("token self answered the secret")
	}

	doToken(t, a, strings.Repeat("0", 64), "GET", "/v1/jobs", nil).wantError(t, http.StatusUnauthorized, "unauthenticated", "not found")
	doToken(t, a, "abc", "GET", "/v1/jobs", nil).wantError(t, http.StatusUnauthorized, "unauthenticated", "malformed")
	testutil.WaitFor(t, 10*time.Second, func() error {
		if r := doToken(t, a, short, "GET", "/v1/jobs", nil); r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), "expired") {
			return fmt.Errorf("expiring token: %d %s", r.status, r.body)
		}
		return nil
	})

	// A refused write is answered without its body being read: the body
	// here never ends.
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ = http.NewRequest("PUT", "http://"+a.HTTPAddr()+"/v1/jobs", pr)
	req.ContentLength = 1 << 20
	req.Header.Set("X-Berth-Token", ro)
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- nil
			return
		}
		done <- resp
	}()
	select {
	case resp := <-done:
		if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("unread body: %v", resp)
		}
		resp.Body.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the refusal waited for the body")
	}
}
