package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/builtin/drivers"
)

// builtinDriverCommand serves a built-in task driver as a go-plugin plugin.
// The agent's driver manager runs it (re-executing the berth binary); run by
// hand it explains that and exits.
func builtinDriverCommand() *cli.Command {
	var names []string
	for _, b := range drivers.All() {
		names = append(names, b.Name)
	}
	return &cli.Command{
		Name:      "driver",
		Usage:     "serve a built-in task driver plugin (started by the agent)",
		ArgsUsage: "NAME",
		Description: fmt.Sprintf("Serves the built-in task driver NAME (%v) over go-plugin on stdio.\n"+
			"The agent's driver manager starts it; it is not meant to be run by hand.", names),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError(c, "builtin driver takes exactly one argument, the driver name, got %q", c.Args().Slice())
			}
			return drivers.Serve(c.Args().First())
		},
	}
}
