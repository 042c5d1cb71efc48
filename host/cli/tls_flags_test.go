package cli

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
)

// resolvedTLS runs the command at path with argv and returns the TLS
// settings it would reach the agent with.
func resolvedTLS(t *testing.T, path []string, argv ...string) api.TLSConfig {
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
	var got api.TLSConfig
	cmd.Action = func(c *cli.Context) error {
		got = apiTLS(c)
		return nil
	}
	if err := app.Run(flagsFirst(app, append([]string{"berth"}, argv...))); err != nil {
		t.Fatalf("berth %s: %v", strings.Join(argv, " "), err)
	}
	return got
}

// TestTLSFlagPrecedence: for -ca-cert, -client-cert and -client-key, the
// command's flag beats the global one, which beats the environment.
func TestTLSFlagPrecedence(t *testing.T) {
	for _, f := range []struct {
		flag, env string
		get       func(api.TLSConfig) string
	}{
		{"ca-cert", api.EnvCACert, func(c api.TLSConfig) string { return c.CACert }},
		{"client-cert", api.EnvClientCert, func(c api.TLSConfig) string { return c.ClientCert }},
		{"client-key", api.EnvClientKey, func(c api.TLSConfig) string { return c.ClientKey }},
	} {
		t.Run(f.flag, func(t *testing.T) {
			t.Setenv(f.env, "env.pem")
			for _, tc := range []struct {
				argv []string
				want string
			}{
				{[]string{"-" + f.flag, "global.pem", "node", "status", "-" + f.flag, "command.pem"}, "command.pem"},
				{[]string{"node", "status", "-" + f.flag, "command.pem"}, "command.pem"},
				{[]string{"-" + f.flag, "global.pem", "operator", "raft", "list-peers"}, "global.pem"},
				{[]string{"node", "status"}, "env.pem"},
				{[]string{"job", "status", "-" + f.flag + "=command.pem", "web"}, "command.pem"},
			} {
				path := []string{"node", "status"}
				switch tc.argv[len(tc.argv)-1] {
				case "list-peers":
					path = []string{"operator", "raft", "list-peers"}
				case "web":
					path = []string{"job", "status"}
				}
				if got := f.get(resolvedTLS(t, path, tc.argv...)); got != tc.want {
					t.Errorf("berth %s: -%s resolved to %q, want %q", strings.Join(tc.argv, " "), f.flag, got, tc.want)
				}
			}
		})
	}
}
