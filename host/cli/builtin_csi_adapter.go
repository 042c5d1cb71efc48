package cli

import (
	"strings"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/builtin/csi/adapters"
)

// builtinCSIAdapterCommand is the entry point of the built-in storage
// adapters: the agent re-executes berth as `berth builtin csi-adapter NAME`
// and talks CSI to it over go-plugin. Its config comes in the environment
// (sdk.StorageAdapterEnv), set by the agent from the plugin block.
func builtinCSIAdapterCommand() *cli.Command {
	names := strings.Join(adapters.Names(), ", ")
	return &cli.Command{
		Name:      "csi-adapter",
		Usage:     "serve a built-in CSI plugin as a storage adapter (" + names + "); started by the agent",
		ArgsUsage: "NAME",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError(c, "builtin csi-adapter: want one adapter name (%s), got %d arguments", names, c.NArg())
			}
			return adapters.Serve(c.Args().First())
		},
	}
}
