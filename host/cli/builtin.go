package cli

import "github.com/urfave/cli/v2"

// builtinCommand groups the entry points of plugins shipped in the binary.
// They are started by the agent (re-executing itself), not by operators,
// except csi-hostpath which may also be run as a task or by hand.
func builtinCommand() *cli.Command {
	return &cli.Command{
		Name:   "builtin",
		Usage:  "run a plugin built into berth (started by the agent)",
		Hidden: false,
		Subcommands: []*cli.Command{
			builtinCSIAdapterCommand(),
			builtinCSIHostpathCommand(),
			builtinDriverCommand(),
		},
	}
}
