// Command clibare is the floor of a berth command line whose API client
// links no protobuf and no gRPC, for the bench's cli section: the same
// framework (urfave/cli), net/http and encoding/json, and `node-status`
// reading the node list as rows (what berth's api.NodeRow reads) from the
// same endpoint. bench/clifloor links berth's real client (rpc/api, with
// the generated protobuf types and gRPC's status codes it brings); the
// difference between the two is what that client costs to start, and
// clibare's own ratio is what any Go command line on this framework that
// asks the agent costs on this machine.
//
//	clibare version
//	clibare node-status -address 127.0.0.1:4646
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/internal/version"
)

type nodeRow struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

func main() {
	app := &cli.App{
		Name:        "clibare",
		Usage:       "a berth CLI start-up floor without protobuf or gRPC (bench cli section)",
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
					resp, err := http.Get("http://" + c.String("address") + "/v1/nodes?per_page=1000&stub=true")
					if err != nil {
						return err
					}
					defer resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						return fmt.Errorf("GET /v1/nodes: %s", resp.Status)
					}
					var nodes []nodeRow
					if err := json.NewDecoder(resp.Body).Decode(&nodes); err != nil {
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
