package cli

import (
	"strings"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/builtin/drivers"
)

// builtinDriverCommand is the entry point of the built-in driver plugins:
// the agent re-executes berth as `berth builtin driver NAME` and talks to it
// over go-plugin. A raw_exec plugin re-executes the same command line once
// more for each task's executor, which sdk.ServeDriver recognises.
func builtinDriverCommand() *cli.Command {
	names := strings.Join(drivers.Names(), ", ")
	return &cli.Command{
		Name:      "driver",
		Usage:     "serve a built-in task driver plugin (" + names + "); started by the agent",
		ArgsUsage: "NAME",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError(c, "builtin driver: want one driver name (%s), got %d arguments", names, c.NArg())
			}
			return drivers.Serve(c.Args().First())
		},
	}
}
