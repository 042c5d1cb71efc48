package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/host/agent"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/api"
)

func aclPolicyFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ro.hcl")
	if err := os.WriteFile(p, []byte("job {\n  policy = \"read\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tokenAgent records the X-Berth-Token of every request.
func tokenAgent(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("X-Berth-Token"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"code":"invalid_argument","message":"no"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
}

// TestTokenPrecedence: the command's -token beats the global one, which
// beats BERTH_TOKEN; every API command takes -token.
func TestTokenPrecedence(t *testing.T) {
	srv, sent := tokenAgent(t)
	t.Setenv(api.EnvToken, "from-env")
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"-address", srv.URL, "acl", "token", "self"}, "from-env"},
		{[]string{"-address", srv.URL, "-token", "global", "acl", "token", "self"}, "global"},
		{[]string{"-address", srv.URL, "-token", "global", "acl", "token", "self", "-token", "cmd"}, "cmd"},
		{[]string{"-address", srv.URL, "job", "status", "-token", "cmd"}, "cmd"},
		{[]string{"-address", srv.URL, "node", "status", "-token", "cmd"}, "cmd"},
	} {
		berth(t, tc.argv...)
		got := sent()
		if len(got) == 0 || got[0] != tc.want {
			t.Errorf("berth %s: sent token %v, want %q", strings.Join(tc.argv, " "), got, tc.want)
		}
	}
	// Every command that takes -address takes -token.
	for _, path := range addressCommands(newApp(nil, nil).Commands, nil) {
		code, _, errOut := berth(t, append(append([]string{}, path...), "-token", "x", "--help")...)
		if code != 0 {
			t.Errorf("berth %s -token x --help: exit %d %s", strings.Join(path, " "), code, errOut)
		}
	}
}

// TestACLCommandsAgainstAnAgent walks the README's section against a dev
// agent with ACL on: bootstrap → policy → read-only token, which reads and
// cannot write, then the token commands.
func TestACLCommandsAgainstAnAgent(t *testing.T) {
	cfg := agent.DevConfig()
	cfg.Ports = agent.Ports{}
	cfg.ACL.Enabled = true
	a, err := agent.New(cfg, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	t.Setenv("BERTH_ADDR", "http://"+a.HTTPAddr())
	t.Setenv(api.EnvToken, "")
	run := func(wantCode int, args ...string) string {
		t.Helper()
		code, out, errOut := berth(t, args...)
		if code != wantCode {
			t.Fatalf("berth %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, wantCode, out, errOut)
		}
		return out + errOut
	}

	run(1, "job", "status")
	var boot struct {
		SecretID string `json:"secret_id"`
	}
	// A fresh server answers 409 until it has recorded its version in
	// the state (ACL commands are gated on every server's version).
	var bootOut string
	testutil.WaitFor(t, 30*time.Second, func() error {
		code, out, errOut := berth(t, "acl", "bootstrap", "-json")
		if code != 0 && strings.Contains(errOut, "wait for every server to record its version") {
			return fmt.Errorf("berth acl bootstrap: %s", errOut)
		}
		if code != 0 {
			t.Fatalf("berth acl bootstrap -json: exit %d, want 0\n%s%s", code, out, errOut)
		}
		bootOut = out
		return nil
	})
	if err := json.Unmarshal([]byte(bootOut), &boot); err != nil || len(boot.SecretID) != 64 {
		t.Fatalf("bootstrap -json: %v %+v", err, boot)
	}
	if out := run(1, "acl", "bootstrap"); !strings.Contains(out, "already done") {
		t.Fatalf("second bootstrap: %s", out)
	}
	t.Setenv(api.EnvToken, boot.SecretID)

	bad := filepath.Join(t.TempDir(), "bad.hcl")
	if err := os.WriteFile(bad, []byte("job {\n  policy = \"reed\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := run(1, "acl", "policy", "apply", "ro", bad); !strings.Contains(out, bad+":2:12: job.policy") {
		t.Fatalf("a bad policy file: %s", out)
	}
	run(0, "acl", "policy", "apply", "-description", "read jobs", "ro", aclPolicyFile(t))
	if out := run(0, "acl", "policy", "list"); !strings.Contains(out, "ro") || !strings.Contains(out, "read jobs") {
		t.Fatalf("policy list: %s", out)
	}
	if out := run(0, "acl", "policy", "info", "ro"); !strings.Contains(out, `policy = "read"`) {
		t.Fatalf("policy info: %s", out)
	}
	var tok struct {
		SecretID string `json:"secret_id"`
		Token    struct {
			AccessorID string `json:"accessor_id"`
		}
	}
	if err := json.Unmarshal([]byte(run(0, "acl", "token", "create", "-name", "reader", "-policy", "ro", "-json")), &tok); err != nil || tok.SecretID == "" {
		t.Fatalf("token create -json: %v", err)
	}
	if out := run(0, "acl", "token", "list"); !strings.Contains(out, tok.Token.AccessorID) || strings.Contains(out, tok.SecretID) {
		t.Fatalf("token list: %s", out)
	}

	t.Setenv(api.EnvToken, tok.SecretID)
	run(0, "job", "status")
	if out := run(0, "acl", "token", "self"); !strings.Contains(out, "reader") || strings.Contains(out, tok.SecretID) {
		t.Fatalf("token self: %s", out)
	}
	job := writeJobFile(t, testJob("web"))
	if out := run(1, "job", "run", "-detach", job); !strings.Contains(out, `Error: permission denied: capability "submit-job" on job is required`) {
		t.Fatalf("job run with a read-only token: %s", out)
	}
	if out := run(1, "acl", "token", "list"); !strings.Contains(out, "permission denied") {
		t.Fatalf("token list with a read-only token: %s", out)
	}

	t.Setenv(api.EnvToken, boot.SecretID)
	if out := run(0, "acl", "token", "update", "-name", "renamed", tok.Token.AccessorID); !strings.Contains(out, "renamed") {
		t.Fatalf("token update: %s", out)
	}
	run(0, "acl", "token", "delete", tok.Token.AccessorID)
	if out := run(1, "job", "status", "-token", tok.SecretID); !strings.Contains(out, "not found") {
		t.Fatalf("a deleted token: %s", out)
	}
	run(0, "acl", "policy", "delete", "ro")
}
