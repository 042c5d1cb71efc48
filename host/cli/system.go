package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func systemCommand() *cli.Command {
	return &cli.Command{
		Name:  "system",
		Usage: "cluster maintenance",
		Subcommands: []*cli.Command{{
			Name:   "gc",
			Usage:  "collect old evaluations, terminal allocations and purged jobs now",
			Flags:  []cli.Flag{addressFlag()},
			Action: systemGC,
		}},
	}
}

func systemGC(c *cli.Context) error {
	if c.NArg() != 0 {
		return usageError(c, "system gc takes no arguments")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	resp, err := client.System().GC(c.Context)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "Garbage collected %d %s, %d %s and %d %s\n",
		resp.GetEvals(), plural(int(resp.GetEvals()), "evaluation"),
		resp.GetAllocs(), plural(int(resp.GetAllocs()), "allocation"),
		resp.GetJobs(), plural(int(resp.GetJobs()), "job"))
	return err
}
