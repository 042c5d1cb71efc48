package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/host/volumespec"
	"berth.dev/berth/internal/units"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// hostVolumeCreate is `volume create FILE` of a file with type = "host":
// the servers pick the node, its plugin makes the volume, and it is
// recorded; the answer is the volume as stored.
func hostVolumeCreate(c *cli.Context, name string, src []byte) error {
	vol, err := volumespec.ParseHost(name, src)
	if err != nil {
		return err
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	resp, err := client.HostVolumes().Create(c.Context, vol)
	if err != nil {
		return err
	}
	v := resp.GetVolume()
	fmt.Fprintf(c.App.Writer, "Created host volume %q with ID %s on node %s\n\n", v.GetName(), v.GetId(), v.GetNodeId())
	return printHostVolume(c.App.Writer, v)
}

// findHostVolume resolves a dynamic host volume's ID or unique prefix;
// a noMatchError when none has it.
func findHostVolume(c *cli.Context, client *api.Client, prefix string) (string, error) {
	return findID(c.Context, "host volume", prefix, client.HostVolumes().List, (*pb.HostVolume).GetId)
}

// hostVolumeOf finds the dynamic host volume an ID or prefix names, "" when
// none does (it may be a CSI volume's) or the agent has no host volume API.
func hostVolumeOf(c *cli.Context, client *api.Client, prefix string) (string, error) {
	id, err := findHostVolume(c, client, prefix)
	var none *noMatchError
	switch {
	case errors.As(err, &none), errcode.Code(err) == codes.NotFound:
		return "", nil
	case err != nil:
		return "", err
	}
	return id, nil
}

// hostVolumeDelete deletes a dynamic host volume through its node's
// plugin; force forgets one whose node is gone, printing the servers'
// warning that its data may remain.
func hostVolumeDelete(c *cli.Context, client *api.Client, id string, force bool) error {
	resp, err := client.HostVolumes().DeleteOpts(c.Context, id, force)
	if err != nil {
		return err
	}
	if w := resp.GetWarning(); w != "" {
		fmt.Fprintf(c.App.ErrWriter, "Warning: %s\n", w)
	}
	_, err = fmt.Fprintf(c.App.Writer, "Successfully deleted host volume %s\n", id)
	return err
}

// listHostVolumes prints the dynamic host volumes (none printed when
// there are none, or the agent is older than the host volume API).
func listHostVolumes(c *cli.Context, client *api.Client, nodeID string, always bool) error {
	params := map[string]string{}
	if nodeID != "" {
		params["node_id"] = nodeID
	}
	vols, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage, Params: params}, client.HostVolumes().List)
	if err != nil {
		if !always && errcode.Code(err) == codes.NotFound {
			return nil
		}
		return err
	}
	if c.Bool("json") {
		return printJSONList(c.App.Writer, vols)
	}
	if len(vols) == 0 {
		if always {
			_, err := fmt.Fprintln(c.App.Writer, "No dynamic host volumes")
			return err
		}
		return nil
	}
	return printHostVolumeTable(c.App.Writer, vols)
}

func printHostVolumeTable(w io.Writer, vols []*pb.HostVolume) error {
	fmt.Fprintln(w, "Dynamic Host Volumes")
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tName\tType\tPlugin ID\tNode ID\tState")
	for _, v := range vols {
		fmt.Fprintf(tw, "%s\t%s\thost\t%s\t%s\t%s\n", shortID(v.GetId()), v.GetName(), v.GetPluginId(), shortID(v.GetNodeId()), pb.EnumWord(v.GetState()))
	}
	return tw.Flush()
}

func printHostVolume(w io.Writer, v *pb.HostVolume) error {
	capacity := "-"
	if b := v.GetCapacityBytes(); b > 0 {
		capacity = units.Bytes(uint64(b))
	}
	var caps []string
	for _, c := range v.GetCapabilities() {
		caps = append(caps, pb.EnumWord(c.GetAccessMode())+"/"+pb.EnumWord(c.GetAttachmentMode()))
	}
	var params []string
	for _, k := range slices.Sorted(maps.Keys(v.GetParameters())) {
		params = append(params, k+"="+v.GetParameters()[k])
	}
	printKV(w, [][2]string{
		{"ID", v.GetId()},
		{"Name", v.GetName()},
		{"Type", "host"},
		{"Plugin ID", v.GetPluginId()},
		{"Node ID", v.GetNodeId()},
		{"State", pb.EnumWord(v.GetState())},
		{"Host Path", orDash(v.GetHostPath())},
		{"Capacity", capacity},
		{"Capabilities", strings.Join(caps, ", ")},
		{"Parameters", orNone(strings.Join(params, ", "))},
	})
	return nil
}
