package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/host/volumespec"
	"berth.dev/berth/internal/units"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

func volumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "volume",
		Usage: "register, create, inspect and claim CSI volumes",
		Subcommands: append([]*cli.Command{
			{
				Name:      "register",
				Usage:     "register a volume the storage provider already has (its external_id), after its plugin validated the capabilities",
				ArgsUsage: "FILE",
				Flags:     []cli.Flag{addressFlag()},
				Action:    func(c *cli.Context) error { return volumeWrite(c, volumespec.ForRegister) },
			},
			{
				Name:      "create",
				Usage:     "have the volume's plugin create it, then register it (type = \"host\": a dynamic host volume, made on a node by a host volume plugin)",
				ArgsUsage: "FILE",
				Flags:     []cli.Flag{addressFlag()},
				Action:    func(c *cli.Context) error { return volumeWrite(c, volumespec.ForCreate) },
			},
			{
				Name:      "deregister",
				Usage:     "forget a volume, leaving it with its provider",
				ArgsUsage: "ID",
				Flags: []cli.Flag{addressFlag(),
					&cli.BoolFlag{Name: "force", Usage: "deregister although claims remain, once every claimant has stopped on its node (or the node is down, fenced or gone); refused until the servers have unpublished every attachment"}},
				Action: volumeDeregister,
			},
			{
				Name:      "delete",
				Usage:     "have the volume's plugin delete it, then deregister it",
				ArgsUsage: "ID",
				Flags: []cli.Flag{addressFlag(), secretFlag(),
					&cli.BoolFlag{Name: "force", Usage: "a dynamic host volume whose node is gone, down or fenced (and that no claim holds): forget it without asking the node; its data may remain there"}},
				Action: volumeDelete,
			},
			{
				Name:      "status",
				Usage:     "list volumes, or show one (by ID or unique ID prefix) with its claims and attachments",
				ArgsUsage: "[ID]",
				Flags: readFlags(
					&cli.BoolFlag{Name: "verbose", Usage: "full IDs, and each claim's and attachment's last error, attempts and next retry"},
					&cli.StringFlag{Name: "node", Usage: "list the volumes with a claim or an attachment on this node (ID or unique prefix)"},
					&cli.StringFlag{Name: "plugin", Usage: "list this plugin's volumes"},
					&cli.StringFlag{Name: "type", Usage: `volume type: "csi" or "host" (dynamic host volumes); without it, both`},
				),
				Action: volumeStatus,
			},
			volumeSnapshotCommand(),
			volumeExpandCommand(),
			volumeDetachCommand(),
		}, volumeClaimCommands()...),
	}
}

// volumeWrite is register and create: the file is parsed and checked here,
// with positions, before anything is sent.
func volumeWrite(c *cli.Context, mode volumespec.Mode) error {
	if c.NArg() != 1 {
		return usageError(c, "volume %s takes exactly one volume file", c.Command.Name)
	}
	name, src, err := readVolumeSource(c.Args().First(), c.App.Reader)
	if err != nil {
		return err
	}
	if mode == volumespec.ForCreate && volumespec.Type(name, src) == "host" {
		return hostVolumeCreate(c, name, src)
	}
	vol, err := volumespec.Parse(name, src, mode)
	if err != nil {
		return err
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	var resp *pb.VolumeRegisterResponse
	if mode == volumespec.ForCreate {
		resp, err = client.Volumes().Create(c.Context, vol)
	} else {
		resp, err = client.Volumes().Register(c.Context, vol)
	}
	if err != nil {
		// The servers' errors name the volume already.
		return err
	}
	w := c.App.Writer
	switch {
	case resp.GetUnchanged():
		fmt.Fprintf(w, "Volume %q exists already as asked (external ID %s): unchanged, nothing created\n",
			resp.GetVolume().GetId(), resp.GetVolume().GetExternalId())
	case mode == volumespec.ForCreate:
		fmt.Fprintf(w, "Created external volume %s with ID %s\n", resp.GetVolume().GetExternalId(), resp.GetVolume().GetId())
	default:
		fmt.Fprintf(w, "Volume %q registered\n", resp.GetVolume().GetId())
	}
	if len(resp.GetWarnings()) > 0 {
		fmt.Fprintln(w, "\nWarnings:")
		for _, s := range resp.GetWarnings() {
			fmt.Fprintf(w, "  * %s\n", s)
		}
	}
	return nil
}

// readVolumeSource reads a volume file, or stdin for "-" (as HCL), and
// returns the name its errors go by.
func readVolumeSource(path string, stdin io.Reader) (string, []byte, error) {
	var src []byte
	var err error
	if path == "-" {
		src, err = io.ReadAll(stdin)
		path = "<stdin>"
	} else {
		src, err = os.ReadFile(path)
	}
	if err != nil {
		return "", nil, fmt.Errorf("reading volume file: %w", err)
	}
	return path, src, nil
}

func volumeDeregister(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "volume deregister takes exactly one volume ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	id, err := findVolume(c, client, c.Args().First())
	if err != nil {
		return err
	}
	if _, err := client.Volumes().Deregister(c.Context, id, c.Bool("force")); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "Volume %q deregistered\n", id)
	return err
}

func volumeDelete(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "volume delete takes exactly one volume ID")
	}
	secrets, err := kvFrom(c, "secret")
	if err != nil {
		return err
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	kind, id, err := resolveVolume(c, client, c.Args().First(), "")
	if err != nil {
		return err
	}
	if kind == kindHost {
		return hostVolumeDelete(c, client, id, c.Bool("force"))
	}
	if c.Bool("force") {
		return usageError(c, "-force forgets a dynamic host volume of a node that is gone; %q is a CSI volume: volume deregister -force", id)
	}
	if _, err := client.Volumes().Delete(c.Context, id, secrets); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "Successfully deleted volume %q\n", id)
	return err
}

// findVolume resolves a volume ID or unique prefix.
func findVolume(c *cli.Context, client *api.Client, prefix string) (string, error) {
	return findID(c.Context, "volume", prefix, client.Volumes().List, func(v *pb.VolumeView) string { return v.GetVolume().GetId() })
}

func volumeStatus(c *cli.Context) error {
	if c.NArg() > 1 {
		return usageError(c, "volume status takes at most one volume ID")
	}
	typ := c.String("type")
	if typ != "" && typ != "csi" && typ != "host" {
		return usageError(c, `volume status -type=%q: "csi" or "host" (without -type, both)`, typ)
	}
	if c.NArg() == 1 && (c.String("node") != "" || c.String("plugin") != "") {
		return usageError(c, "-node and -plugin filter the list; they do not go with a volume ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	var csiID string
	if c.NArg() == 1 {
		kind, id, err := resolveVolume(c, client, c.Args().First(), typ)
		if err != nil {
			return err
		}
		if kind == kindHost {
			v, _, err := client.HostVolumes().Info(c.Context, id, nil)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, v)
			}
			return printHostVolume(c.App.Writer, v)
		}
		csiID = id
	}
	if typ == "host" {
		node := ""
		if n := c.String("node"); n != "" {
			if node, err = volumeNodeID(c, client, n); err != nil {
				return err
			}
		}
		return listHostVolumes(c, client, node, true)
	}
	if c.NArg() == 0 {
		params := map[string]string{}
		if p := c.String("plugin"); p != "" {
			params["plugin_id"] = p
		}
		if n := c.String("node"); n != "" {
			id, err := volumeNodeID(c, client, n)
			if err != nil {
				return err
			}
			params["node_id"] = id
		}
		vols, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage, Params: params}, client.Volumes().List)
		if err != nil {
			return err
		}
		if c.Bool("json") {
			// The bare array of CSI volumes (its shape before host
			// volumes); -type host -json prints the host volumes.
			return printJSONList(c.App.Writer, vols)
		}
		if err := printVolumeTable(c.App.Writer, vols); err != nil {
			return err
		}
		if err := printVolumeErrors(c.App.Writer, vols, c.Bool("verbose")); err != nil {
			return err
		}
		if typ == "" && c.String("plugin") == "" {
			fmt.Fprintln(c.App.Writer)
			return listHostVolumes(c, client, params["node_id"], false)
		}
		return nil
	}
	v, _, err := client.Volumes().Info(c.Context, csiID, nil)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	return printVolume(c.App.Writer, v, c.Bool("verbose"))
}

// volumeNodeID resolves -node as a registered node's ID or unique prefix;
// a node no longer registered (garbage-collected, its claims not yet
// freed) is taken by its exact ID.
func volumeNodeID(c *cli.Context, client *api.Client, prefix string) (string, error) {
	id, err := findID(c.Context, "node", prefix, client.Nodes, (*pb.Node).GetId)
	var none *noMatchError
	if errors.As(err, &none) {
		return prefix, nil
	}
	return id, err
}

// accessModeInUse is the access mode of the volume's claims (all claims a
// volume holds at once share one), "<none>" without claims.
func accessModeInUse(v *pb.VolumeView) string {
	for _, cl := range v.GetClaims() {
		return pb.EnumWord(cl.GetAccessMode())
	}
	return "<none>"
}

func printVolumeTable(w io.Writer, vols []*pb.VolumeView) error {
	if len(vols) == 0 {
		_, err := fmt.Fprintln(w, "No volumes")
		return err
	}
	fmt.Fprintln(w, "Container Storage Interface")
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tName\tPlugin ID\tSchedulable\tAccess Mode\tClaims")
	for _, v := range vols {
		vol := v.GetVolume()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%d\n", vol.GetId(), vol.GetName(), vol.GetPluginId(), vol.GetSchedulable(),
			accessModeInUse(v), len(v.GetClaims()))
	}
	return tw.Flush()
}

func printVolume(w io.Writer, v *pb.VolumeView, verbose bool) error {
	vol := v.GetVolume()
	capacity := "-"
	if b := vol.GetCapacityBytes(); b > 0 {
		capacity = units.Bytes(uint64(b))
	}
	if p := vol.GetNodeExpansionPendingBytes(); p > 0 {
		capacity += fmt.Sprintf(" (node expansion to %s pending)", units.Bytes(uint64(p)))
	}
	mount := "<none>"
	if mo := vol.GetMountOptions(); mo.GetFsType() != "" || len(mo.GetMountFlags()) > 0 {
		mount = strings.TrimSpace(fmt.Sprintf("fs_type: %s flags: %s", orNone(mo.GetFsType()), orNone(strings.Join(mo.GetMountFlags(), ","))))
	}
	printKV(w, [][2]string{
		{"ID", vol.GetId()},
		{"Name", vol.GetName()},
		{"External ID", orDash(vol.GetExternalId())},
		{"Plugin ID", vol.GetPluginId()},
		{"Provider", orDash(vol.GetProvider())},
		{"Version", orDash(vol.GetProviderVersion())},
		{"Capacity", capacity},
		{"Schedulable", fmt.Sprint(vol.GetSchedulable())},
		{"Controller Required", fmt.Sprint(vol.GetControllerRequired())},
		{"Access Mode", accessModeInUse(v)},
		{"Mount Options", mount},
		{"Topology", topologies(vol.GetAccessibleTopology())},
	})
	short := func(id string) string {
		if verbose {
			return id
		}
		return shortID(id)
	}

	fmt.Fprintln(w, "\nCapabilities")
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Access Mode\tAttachment Mode")
	for _, cp := range vol.GetCapabilities() {
		fmt.Fprintf(tw, "%s\t%s\n", pb.EnumWord(cp.GetAccessMode()), pb.EnumWord(cp.GetAttachmentMode()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nClaims")
	if len(v.GetClaims()) == 0 {
		fmt.Fprintln(w, "No claims")
	} else {
		tw = newTable(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tClaimant\tNode ID\tMode\tState\tAttempts")
		for _, cl := range v.GetClaims() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", short(cl.GetId()), claimant(cl, short), short(cl.GetNodeId()),
				pb.EnumWord(cl.GetMode()), pb.EnumWord(cl.GetState()), cl.GetAttempts())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	if len(v.GetAttachments()) > 0 {
		fmt.Fprintln(w, "\nAttachments")
		tw = newTable(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "Node ID\tState\tController Node\tAttempts")
		for _, a := range v.GetAttachments() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", short(a.GetNodeId()), pb.EnumWord(a.GetState()), short(orDash(a.GetControllerNodeId())), a.GetAttempts())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return printVolumeErrors(w, []*pb.VolumeView{v}, verbose)
}

// printVolumeErrors ends status: with verbose, an Errors section of one
// line per failing claim or attachment, each naming the volume, the
// claimant and the node in full, so a line pasted alone into a ticket
// still says what failed; without, a count and the hint.
func printVolumeErrors(w io.Writer, vols []*pb.VolumeView, verbose bool) error {
	var lines []string
	full := func(id string) string { return id }
	for _, v := range vols {
		id := v.GetVolume().GetId()
		for _, cl := range v.GetClaims() {
			if e := cl.GetLastError(); e != nil {
				lines = append(lines, fmt.Sprintf("volume %q, claim %s of %s on node %s: %s; %s", id, cl.GetId(), claimant(cl, full), cl.GetNodeId(),
					volumeError(e), retries(cl.GetAttempts(), cl.GetNextRetryAt())))
			}
		}
		for _, a := range v.GetAttachments() {
			if e := a.GetLastError(); e != nil {
				lines = append(lines, fmt.Sprintf("volume %q, attachment to node %s (%s): %s; %s", id, a.GetNodeId(), pb.EnumWord(a.GetState()),
					volumeError(e), retries(a.GetAttempts(), a.GetNextRetryAt())))
			}
		}
	}
	switch {
	case len(lines) == 0:
		return nil
	case !verbose:
		_, err := fmt.Fprintf(w, "\n%d claims or attachments have an error; -verbose shows them\n", len(lines))
		return err
	}
	_, err := fmt.Fprintf(w, "\nErrors\n%s\n", strings.Join(lines, "\n"))
	return err
}

// claimant is "alloc ID" or "operator".
func claimant(cl *pb.Claim, short func(string) string) string {
	if cl.GetOperator() {
		return "operator"
	}
	return "alloc " + short(cl.GetAllocId())
}

// volumeError is the message with its class and gRPC code.
func volumeError(e *pb.VolumeError) string {
	return fmt.Sprintf("%s (%s, %s)", e.GetMessage(), pb.EnumWord(e.GetClass()), codes.Code(e.GetCode()))
}

func retries(attempts int32, next int64) string {
	if next == 0 {
		return fmt.Sprintf("%d attempts, no retry planned", attempts)
	}
	return fmt.Sprintf("%d attempts, next retry %s", attempts, formatNanos(next))
}

// topologies is "rack=r1,zone=z; rack=r2", "<none>" when empty.
func topologies(ts []*pb.Topology) string {
	var out []string
	for _, t := range ts {
		var kv []string
		for _, k := range sortedKeys(t.GetSegments()) {
			kv = append(kv, k+"="+t.GetSegments()[k])
		}
		out = append(out, strings.Join(kv, ","))
	}
	if len(out) == 0 {
		return "<none>"
	}
	return strings.Join(out, "; ")
}

// printNodeVolumes is node status's volume section: each volume with a
// claim or an attachment on the node, with its plugin and provider.
func printNodeVolumes(w io.Writer, nodeID string, vols []*pb.VolumeView) error {
	if len(vols) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nCSI Volumes")
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tName\tPlugin ID\tProvider\tSchedulable\tClaims Here\tAttachment")
	for _, v := range vols {
		vol := v.GetVolume()
		here := 0
		for _, cl := range v.GetClaims() {
			if cl.GetNodeId() == nodeID {
				here++
			}
		}
		att := "-"
		if i := slices.IndexFunc(v.GetAttachments(), func(a *pb.Attachment) bool { return a.GetNodeId() == nodeID }); i >= 0 {
			att = pb.EnumWord(v.GetAttachments()[i].GetState())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%d\t%s\n", vol.GetId(), vol.GetName(), vol.GetPluginId(), orDash(vol.GetProvider()),
			vol.GetSchedulable(), here, att)
	}
	return tw.Flush()
}
