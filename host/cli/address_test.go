package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
)

// fakeAgent is an HTTP server on 127.0.0.1 that records every request and
// refuses it with a JSON error naming the agent, so a test can tell which
// agent a command talked to without depending on any reply format.
type fakeAgent struct {
	name string
	srv  *httptest.Server

	mu   sync.Mutex
	reqs []string
}

func newFakeAgent(t *testing.T, name string) *fakeAgent {
	t.Helper()
	a := &fakeAgent{name: name}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.reqs = append(a.reqs, r.Method+" "+r.URL.Path)
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"code":"invalid_argument","message":"answered by agent ` + name + `"}`))
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAgent) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.reqs...)
}

func (a *fakeAgent) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reqs = nil
}

// addressCommands returns the path of every command that takes -address,
// found by walking the real command tree, so a new API command is covered
// without editing this test.
func addressCommands(cmds []*cli.Command, prefix []string) [][]string {
	var out [][]string
	for _, c := range cmds {
		path := append(append([]string(nil), prefix...), c.Name)
		for _, f := range c.Flags {
			if slices.Contains(f.Names(), "address") {
				out = append(out, path)
				break
			}
		}
		out = append(out, addressCommands(c.Subcommands, path)...)
	}
	return out
}

// TestGlobalAddressReachesEveryCommand runs every command that talks to an
// agent with the global flag (`berth -address X node status`, as --help
// shows it) while BERTH_ADDR names another agent, and checks that the
// request went to X. Before the fix the command-level flag's default
// shadowed the global one and every request went to BERTH_ADDR (or the
// default address).
func TestGlobalAddressReachesEveryCommand(t *testing.T) {
	global, env := newFakeAgent(t, "global"), newFakeAgent(t, "env")
	t.Setenv(api.EnvAddress, env.srv.URL)

	snap := filepath.Join(t.TempDir(), "state.snap")
	if err := os.WriteFile(snap, []byte("not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobFile := writeJobFile(t, testJob("web"))
	volFile := writeVolumeFile(t, "data.hcl", registerHCL)
	newVolFile := writeVolumeFile(t, "new.hcl", createHCL)
	// Commands whose arguments are checked before any request is sent.
	args := map[string][]string{
		"operator snapshot save":    {filepath.Join(t.TempDir(), "out.snap")},
		"operator snapshot restore": {snap},
		"server force-leave":        {"s1"},
		"job run":                   {jobFile},
		"job plan":                  {jobFile},
		"job validate":              {jobFile},
		"job stop":                  {"web"},
		"job history":               {"web"},
		"job revert":                {"web", "1"},
		"job inspect":               {"web"},
		"alloc status":              {"a1"},
		"alloc logs":                {"a1"},
		"alloc stop":                {"a1"},
		"alloc restart":             {"a1"},
		"eval status":               {"e1"},
		"node drain":                {"-enable", "-yes", "n1"},
		"node eligibility":          {"-enable", "n1"},
		"volume claim":              {"data"},
		"volume release":            {"c1"},
		"volume register":           {volFile},
		"volume create":             {newVolFile},
		"volume deregister":         {"data"},
		"volume delete":             {"data"},
		"volume snapshot create":    {"data"},
		"volume snapshot list":      {"-plugin", "ebs"},
		"volume snapshot delete":    {"ebs", "snap-1"},
		"volume expand":             {"-capacity-min", "1GiB", "data"},
		"node fence":                {"-yes", "n1"},
		"node readmit":              {"n1"},
		"volume detach":             {"data", "n1"},
		"acl policy apply":          {"ro", aclPolicyFile(t)},
		"acl policy info":           {"ro"},
		"acl policy delete":         {"ro"},
		"acl token info":            {"a1"},
		"acl token update":          {"a1"},
		"acl token delete":          {"a1"},
	}
	// Commands whose errors exit with another code than 1.
	codes := map[string]int{"job plan": planError}

	app := newApp(nil, nil)
	cmds := addressCommands(app.Commands, nil)
	if len(cmds) < 5 {
		t.Fatalf("found %d commands with -address (%v); the walk of the command tree is broken", len(cmds), cmds)
	}
	for _, path := range cmds {
		name := strings.Join(path, " ")
		global.reset()
		env.reset()
		argv := append(append([]string{"-address", global.srv.URL}, path...), args[name]...)
		code, _, errOut := berth(t, argv...)
		if got := env.requests(); len(got) > 0 {
			t.Errorf("berth %s: sent %v to BERTH_ADDR's agent, not to the global -address", strings.Join(argv, " "), got)
			continue
		}
		if len(global.requests()) == 0 {
			t.Errorf("berth %s: no request reached the global -address (exit %d, stderr %q); if the command needs arguments, add them to args", strings.Join(argv, " "), code, errOut)
			continue
		}
		want := 1
		if c, ok := codes[name]; ok {
			want = c
		}
		if code != want || !strings.Contains(errOut, "answered by agent global") {
			t.Errorf("berth %s: exit %d, stderr %q; want exit %d with the global agent's error", strings.Join(argv, " "), code, errOut, want)
		}
	}
}

// TestAddressPrecedence checks the documented order: the command's own
// -address, then the global -address, then BERTH_ADDR, then the default.
func TestAddressPrecedence(t *testing.T) {
	cmdAgent, global, env := newFakeAgent(t, "command"), newFakeAgent(t, "global"), newFakeAgent(t, "env")
	for _, tc := range []struct {
		name string
		env  string
		argv []string
		want *fakeAgent
	}{
		{"command flag beats global flag and env", env.srv.URL,
			[]string{"-address", global.srv.URL, "node", "status", "-address", cmdAgent.srv.URL}, cmdAgent},
		{"command flag alone beats env", env.srv.URL,
			[]string{"node", "status", "-address", cmdAgent.srv.URL}, cmdAgent},
		{"global flag beats env", env.srv.URL,
			[]string{"-address", global.srv.URL, "node", "status"}, global},
		{"global flag beats env, nested command", env.srv.URL,
			[]string{"-address", global.srv.URL, "operator", "raft", "list-peers"}, global},
		{"global flag as --address=", env.srv.URL,
			[]string{"--address=" + global.srv.URL, "server", "members"}, global},
		{"env without flags", env.srv.URL,
			[]string{"node", "status"}, env},
		{"address without scheme", env.srv.URL,
			[]string{"-address", strings.TrimPrefix(global.srv.URL, "http://"), "node", "status"}, global},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(api.EnvAddress, tc.env)
			for _, a := range []*fakeAgent{cmdAgent, global, env} {
				a.reset()
			}
			code, _, errOut := berth(t, tc.argv...)
			for _, a := range []*fakeAgent{cmdAgent, global, env} {
				n := len(a.requests())
				switch {
				case a == tc.want && n == 0:
					t.Errorf("berth %s: agent %s got no request (exit %d, stderr %q)", strings.Join(tc.argv, " "), a.name, code, errOut)
				case a != tc.want && n > 0:
					t.Errorf("berth %s: agent %s got %v; want only agent %s", strings.Join(tc.argv, " "), a.name, a.requests(), tc.want.name)
				}
			}
			if !strings.Contains(errOut, "answered by agent "+tc.want.name) {
				t.Errorf("berth %s: stderr %q, want agent %s's error", strings.Join(tc.argv, " "), errOut, tc.want.name)
			}
		})
	}
}

// resolvedAddress runs argv with the Action of the command at path replaced
// by one that records the address apiClient resolves, so no request is made.
func resolvedAddress(t *testing.T, path []string, argv ...string) string {
	t.Helper()
	app := newApp(io.Discard, io.Discard)
	cmds := app.Commands
	var cmd *cli.Command
	for _, name := range path {
		i := slices.IndexFunc(cmds, func(c *cli.Command) bool { return c.Name == name })
		if i < 0 {
			t.Fatalf("no command %q in %v", name, path)
		}
		cmd, cmds = cmds[i], cmds[i].Subcommands
	}
	var got string
	cmd.Action = func(c *cli.Context) error {
		client, err := apiClient(c)
		if err != nil {
			return err
		}
		got = client.Address()
		return nil
	}
	if err := app.Run(append([]string{"berth"}, argv...)); err != nil {
		t.Fatalf("berth %s: %v", strings.Join(argv, " "), err)
	}
	return got
}

// TestDefaultAddress: with no flag and BERTH_ADDR unset or empty the CLI
// talks to the local agent's default address (an empty BERTH_ADDR once
// made every command fail with "api: empty address").
func TestDefaultAddress(t *testing.T) {
	t.Setenv(api.EnvAddress, "")
	if got := resolvedAddress(t, []string{"node", "status"}, "node", "status"); got != "http://127.0.0.1:7646" {
		t.Errorf("address with no flag and an empty %s = %q, want http://127.0.0.1:7646", api.EnvAddress, got)
	}
	if err := os.Unsetenv(api.EnvAddress); err != nil {
		t.Fatal(err)
	}
	if got := resolvedAddress(t, []string{"operator", "raft", "list-peers"}, "operator", "raft", "list-peers"); got != "http://127.0.0.1:7646" {
		t.Errorf("address with no flag and no %s = %q, want http://127.0.0.1:7646", api.EnvAddress, got)
	}
	if got := resolvedAddress(t, []string{"node", "status"}, "-address", "10.0.0.9:7646", "node", "status"); got != "http://10.0.0.9:7646" {
		t.Errorf("address with a global flag = %q, want http://10.0.0.9:7646", got)
	}
}

// TestHelpShowsAddressSources checks that --help tells where the address
// comes from, since the flag has no plain default any more, and that the
// default it names is the one the API client uses.
func TestHelpShowsAddressSources(t *testing.T) {
	t.Setenv(api.EnvAddress, "")
	for _, argv := range [][]string{{"--help"}, {"node", "status", "--help"}} {
		code, out, _ := berth(t, argv...)
		if code != 0 || !strings.Contains(out, "--address") || !strings.Contains(out, "$"+api.EnvAddress) || !strings.Contains(out, api.DefaultAddress()) {
			t.Errorf("berth %s: exit %d, help without the address flag's sources:\n%s", strings.Join(argv, " "), code, out)
		}
	}
}

// TestGlobalFlagsAreResolved guards the bug class, not just -address: urfave/cli
// lets a command's flag of the same name shadow a global one, so every
// global flag must be read through flagString and have a precedence test
// here. A new global flag fails this test until it does.
func TestGlobalFlagsAreResolved(t *testing.T) {
	tested := map[string]bool{"address": true, "token": true, // TestAddressPrecedence, TestTokenPrecedence
		"ca-cert": true, "client-cert": true, "client-key": true} // TestTLSFlagPrecedence
	for _, f := range newApp(nil, nil).Flags {
		for _, n := range f.Names() {
			if !tested[n] {
				t.Errorf("global flag -%s has no precedence test: read it with flagString and test it like TestAddressPrecedence", n)
			}
		}
	}
}
