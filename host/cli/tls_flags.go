package cli

import (
	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
)

// tlsFlags are the TLS settings of every command that talks to an agent,
// Nomad's names. Like -address they are declared globally and on every
// API command, without EnvVars (apiTLS applies flag > environment).
func tlsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "ca-cert", Usage: "PEM CA certificate to verify an https:// agent with", DefaultText: "$" + api.EnvCACert},
		&cli.StringFlag{Name: "client-cert", Usage: "PEM client certificate for an agent that verifies clients", DefaultText: "$" + api.EnvClientCert},
		&cli.StringFlag{Name: "client-key", Usage: "PEM key of -client-cert", DefaultText: "$" + api.EnvClientKey},
	}
}

// addTLSFlags gives every command that takes -address the TLS flags too.
func addTLSFlags(cmds []*cli.Command) {
	for _, cmd := range cmds {
		if hasFlag(cmd.Flags, "address") {
			cmd.Flags = append(cmd.Flags, tlsFlags()...)
		}
		addTLSFlags(cmd.Subcommands)
	}
}

// apiTLS is the TLS settings of the command line: each flag, else its
// environment variable.
func apiTLS(c *cli.Context) api.TLSConfig {
	t := api.TLSConfigFromEnv()
	for name, dst := range map[string]*string{"ca-cert": &t.CACert, "client-cert": &t.ClientCert, "client-key": &t.ClientKey} {
		if v, ok := flagString(c, name); ok {
			*dst = v
		}
	}
	return t
}
