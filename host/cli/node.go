package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/internal/units"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

func nodeCommand() *cli.Command {
	return &cli.Command{
		Name:  "node",
		Usage: "inspect client nodes, drain them and set their eligibility",
		Subcommands: []*cli.Command{
			{
				Name:      "status",
				Usage:     "list nodes, or show one node (by ID or unique ID prefix)",
				ArgsUsage: "[ID]",
				Flags:     readFlags(&cli.BoolFlag{Name: "verbose", Usage: "full IDs, fingerprint attributes and driver details"}),
				Action:    nodeStatus,
			},
			nodeDrainCommand(),
			nodeEligibilityCommand(),
			nodeFenceCommand(),
			nodeReadmitCommand(),
		},
	}
}

func nodeStatus(c *cli.Context) error {
	if c.NArg() > 1 {
		return usageError(c, "node status takes at most one node ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	if c.NArg() == 0 {
		if c.Bool("json") {
			nodes, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage}, client.Nodes)
			if err != nil {
				return err
			}
			return printJSONList(c.App.Writer, nodes)
		}
		// The table needs eight columns: rows, not messages (see
		// api.NodeRow: decoding the first message is what costs).
		rows, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage}, client.NodeRows)
		if err != nil {
			return err
		}
		return printNodeTable(c.App.Writer, rows, c.Bool("verbose"))
	}
	node, err := findNode(c, client, c.Args().First())
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, node)
	}
	vols, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage, Params: map[string]string{"node_id": node.GetId()}},
		client.Volumes().List)
	if err != nil {
		return fmt.Errorf("node %s: listing its volumes: %w", node.GetId(), err)
	}
	return printNode(c.App.Writer, node, vols, c.Bool("verbose"))
}

// findNode resolves a node ID or unique prefix (findID) and reads the node.
func findNode(c *cli.Context, client *api.Client, prefix string) (*pb.Node, error) {
	id, err := findID(c.Context, "node", prefix, client.Nodes, (*pb.Node).GetId)
	if err != nil {
		return nil, err
	}
	node, _, err := client.Node(c.Context, id, nil)
	return node, err
}

// nodeStatusName is the status as the API's JSON spells it.
func nodeStatusName(s pb.NodeStatus) string { return pb.EnumWord(s) }

func printNodeTable(w io.Writer, nodes []api.NodeRow, verbose bool) error {
	if len(nodes) == 0 {
		_, err := fmt.Fprintln(w, "No nodes registered")
		return err
	}
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tName\tStatus\tEligibility\tDrain\tDrivers\tAddress\tVersion")
	for _, n := range nodes {
		id := n.ID
		if !verbose {
			id = shortID(id)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\t%s\t%s\n", id, n.Name, n.Status,
			n.Eligibility, n.Draining, healthyDrivers(n), n.HTTPAddr, n.Fingerprint.BerthVersion)
	}
	return tw.Flush()
}

// healthyDrivers lists the names of healthy drivers ("<none>" without any).
func healthyDrivers(n api.NodeRow) string {
	var names []string
	for name, d := range n.Drivers {
		if d.Healthy {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "<none>"
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// printNode shows a node with vols, the volumes claimed or attached on it.
func printNode(w io.Writer, n *pb.Node, vols []*pb.VolumeView, verbose bool) error {
	fp := n.GetFingerprint()
	tw := newTable(w, 0, 4, 2, ' ', 0)
	rows := [][2]string{
		{"ID", n.GetId()},
		{"Name", n.GetName()},
		{"Status", nodeStatusName(n.GetStatus())},
		{"Status Description", n.GetStatusDescription()},
		{"Status Updated", formatNanos(n.GetStatusUpdatedAt())},
		{"Eligibility", pb.EnumWord(n.GetEligibility())},
		{"Drain", drainText(n.GetDrain())},
		{"Registered", formatNanos(n.GetRegisteredAt())},
		{"Address", n.GetHttpAddr()},
		{"Host", fmt.Sprintf("%s (%s/%s)", fp.GetHostname(), fp.GetOs(), fp.GetArch())},
		{"CPU Cores", fmt.Sprint(fp.GetCpuCores())},
		{"Memory", units.Bytes(fp.GetMemoryBytes())},
		{"Berth Version", fp.GetBerthVersion()},
		{"Identity", identityText(n)},
	}
	if n.GetFenced() {
		// Said only when it is: a fence is rare, and what it changes (no
		// placements, claims released at once) must not be missed.
		rows = append(rows, [2]string{"Fenced", "since " + formatNanos(n.GetFencedAt()) + " (berth node fence -unfence lifts it)"})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t= %s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nDrivers")
	tw = newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Name\tHealthy\tSource\tVersion\tDescription")
	names := make([]string, 0, len(n.GetDrivers()))
	for name := range n.GetDrivers() {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		d := n.GetDrivers()[name]
		source := "builtin"
		if !d.GetBuiltin() {
			source = "plugin_dir"
			if verbose && d.GetPath() != "" {
				source = d.GetPath()
			}
		}
		fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s\n", name, d.GetHealthy(), source, d.GetVersion(), d.GetHealthDescription())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printNodePlugins(w, n); err != nil {
		return err
	}
	if err := printHostVolumes(w, n); err != nil {
		return err
	}
	if err := printNodeVolumes(w, n.GetId(), vols); err != nil {
		return err
	}
	if verbose {
		printAttributes(w, "Attributes", fp.GetAttributes())
		for _, name := range names {
			printAttributes(w, "Driver "+name+" Attributes", n.GetDrivers()[name].GetAttributes())
		}
	}
	return nil
}

// drainText says whether the node drains and, when it does, since when
// and until when its allocs may take to move off.
func drainText(d *pb.DrainStrategy) string {
	if d == nil {
		return "false"
	}
	var deadline string
	switch ms := d.GetDeadlineMs(); {
	case ms < 0:
		deadline = "forced: allocs stop at once"
	case ms == 0:
		deadline = "no deadline"
	default:
		deadline = "deadline " + formatNanos(d.GetForceDeadlineAt())
	}
	text := fmt.Sprintf("true; since %s, %s", formatNanos(d.GetStartedAt()), deadline)
	if d.GetIgnoreSystemJobs() {
		text += ", system allocs stay"
	}
	return text
}

func printAttributes(w io.Writer, title string, attrs map[string]string) {
	if len(attrs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	tw := newTable(w, 0, 4, 2, ' ', 0)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t= %s\n", k, attrs[k])
	}
	_ = tw.Flush()
}

func formatNanos(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339)
}

// formatNanosMillis is formatNanos with milliseconds.
func formatNanosMillis(ns int64) string {
	return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
