// Command clifloor is the floor of berth's CLI start-up, for the bench's
// cli section: a command line on the same framework (urfave/cli) that
// links only what `berth version` and `berth node status` themselves need
// (the HTTP API client, rpc/api, with berth's generated protobuf types and
// gRPC's status codes it brings), and none of the agent, servers, drivers
// or plugins that the one berth binary also carries. Its start-up is what
// those two commands would cost if nothing else were linked: the part of
// berth's time above it is the price of one binary.
//
//	clifloor version
//	clifloor node-status -address 127.0.0.1:4646
package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/api"
)

func main() {
	app := &cli.App{
		Name:        "clifloor",
		Usage:       "berth's CLI start-up floor (bench cli section)",
		HideVersion: true,
		Commands: []*cli.Command{
			{
				Name: "version",
				Action: func(c *cli.Context) error {
					_, err := fmt.Fprintf(c.App.Writer, "berth v%s\n", version.Version)
					return err
				},
			},
			{
				Name:  "node-status",
				Flags: []cli.Flag{&cli.StringFlag{Name: "address", Value: "127.0.0.1:4646"}},
				Action: func(c *cli.Context) error {
					client, err := api.NewClient("http://" + c.String("address"))
					if err != nil {
						return err
					}
					// As berth node status reads the list: rows.
					nodes, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: 1000}, client.NodeRows)
					if err != nil {
						return err
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tName\tStatus")
					for _, n := range nodes {
						fmt.Fprintf(tw, "%s\t%s\t%s\n", n.ID, n.Name, n.Status)
					}
					return tw.Flush()
				},
			},
		},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}
