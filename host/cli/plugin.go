package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

func pluginCommand() *cli.Command {
	return &cli.Command{
		Name:  "plugin",
		Usage: "inspect the CSI plugins the clients run",
		Subcommands: []*cli.Command{
			{
				Name:      "status",
				Usage:     "list CSI plugins, or show one (by ID or unique ID prefix)",
				ArgsUsage: "[ID]",
				Flags: readFlags(
					&cli.BoolFlag{Name: "verbose", Usage: "full IDs and each instance on each node"},
					&cli.StringFlag{Name: "type", Value: "csi", Usage: `plugin type: only "csi"`},
				),
				Action: pluginStatus,
			},
		},
	}
}

func pluginStatus(c *cli.Context) error {
	if c.NArg() > 1 {
		return usageError(c, "plugin status takes at most one plugin ID")
	}
	if t := c.String("type"); t != "csi" {
		return usageError(c, "plugin status -type=%q: the only plugin type is csi", t)
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	if c.NArg() == 0 {
		plugins, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage}, client.CSIPlugins().List)
		if err != nil {
			return err
		}
		if c.Bool("json") {
			return printJSONList(c.App.Writer, plugins)
		}
		return printPluginTable(c.App.Writer, plugins)
	}
	id, err := findID(c.Context, "CSI plugin", c.Args().First(), client.CSIPlugins().List, (*pb.CSIPlugin).GetId)
	if err != nil {
		return err
	}
	p, _, err := client.CSIPlugins().Info(c.Context, id, nil)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, p)
	}
	return printPlugin(c.App.Writer, p, c.Bool("verbose"))
}

func printPluginTable(w io.Writer, plugins []*pb.CSIPlugin) error {
	if len(plugins) == 0 {
		_, err := fmt.Fprintln(w, "No CSI plugins")
		return err
	}
	fmt.Fprintln(w, "Container Storage Interface")
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tProvider\tControllers Healthy/Expected\tNodes Healthy/Expected")
	for _, p := range plugins {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d/%d\n", p.GetId(), orDash(p.GetProvider()),
			p.GetControllersHealthy(), p.GetControllersExpected(), p.GetNodesHealthy(), p.GetNodesExpected())
	}
	return tw.Flush()
}

func printPlugin(w io.Writer, p *pb.CSIPlugin, verbose bool) error {
	printKV(w, [][2]string{
		{"ID", p.GetId()},
		{"Provider", orDash(p.GetProvider())},
		{"Version", orDash(p.GetVersion())},
		{"Controllers Healthy", fmt.Sprint(p.GetControllersHealthy())},
		{"Controllers Expected", fmt.Sprint(p.GetControllersExpected())},
		{"Nodes Healthy", fmt.Sprint(p.GetNodesHealthy())},
		{"Nodes Expected", fmt.Sprint(p.GetNodesExpected())},
		{"Controller Required", fmt.Sprint(p.GetControllerRequired())},
		{"Schedulable", fmt.Sprint(p.GetSchedulable())},
	})
	short := func(id string) string {
		if verbose {
			return id
		}
		return shortID(id)
	}

	fmt.Fprintln(w, "\nAllocations")
	if len(p.GetAllocations()) == 0 {
		fmt.Fprintln(w, "No allocations run this plugin")
	} else {
		tw := newTable(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNode ID\tJob ID\tType\tHealthy")
		for _, a := range p.GetAllocations() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\n", short(a.GetAllocId()), short(a.GetNodeId()), a.GetJobId(), pb.EnumWord(a.GetType()), a.GetHealthy())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if !verbose {
		return nil
	}
	fmt.Fprintln(w, "\nInstances")
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Node ID\tType\tSource\tAlloc ID\tHealthy\tProvider\tVersion\tDescription")
	for _, side := range []map[string]*pb.CSIPluginInfo{p.GetControllers(), p.GetNodes()} {
		for _, node := range sortedKeys(side) {
			i := side[node]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\t%s\t%s\n", node, pb.EnumWord(i.GetType()), pb.EnumWord(i.GetSource()), orDash(i.GetAllocId()),
				i.GetHealthy(), orDash(i.GetProvider()), orDash(i.GetProviderVersion()), i.GetHealthDescription())
		}
	}
	return tw.Flush()
}

// printNodePlugins is node status's CSI section: each plugin instance the
// node reported, controllers first; nothing when it runs none.
func printNodePlugins(w io.Writer, n *pb.Node) error {
	if len(n.GetCsiControllerPlugins())+len(n.GetCsiNodePlugins()) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nCSI Plugins")
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tType\tHealthy\tProvider\tVersion\tDescription")
	for _, side := range []struct {
		typ string
		m   map[string]*pb.CSIPluginInfo
	}{{"controller", n.GetCsiControllerPlugins()}, {"node", n.GetCsiNodePlugins()}} {
		for _, id := range sortedKeys(side.m) {
			i := side.m[id]
			fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\t%s\n", id, side.typ, i.GetHealthy(), orDash(i.GetProvider()), orDash(i.GetProviderVersion()),
				strings.TrimSpace(i.GetHealthDescription()))
		}
	}
	return tw.Flush()
}
