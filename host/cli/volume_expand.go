package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/host/volumespec"
	"berth.dev/berth/internal/units"
	"berth.dev/berth/rpc/pb"
)

func volumeExpandCommand() *cli.Command {
	return &cli.Command{
		Name:  "expand",
		Usage: "grow a volume with its plugin, on the storage side and on every node using it",
		Description: "Calls the plugin's ControllerExpandVolume; when the plugin asks for a node expansion too\n" +
			"(or expands on its nodes alone: no controller service, or one without EXPAND_VOLUME), the\n" +
			"servers have every node holding the volume staged or published call NodeExpandVolume, and\n" +
			"wait for them. The volume's capacity is recorded once every node succeeded; a node's failure\n" +
			"is shown for that node and the command exits 1 (running it again retries); a node that no\n" +
			"longer holds the volume is shown \"not held\". When no node made it, one failed, or a node is\n" +
			"still staging the volume, the node expansion stays pending: the next node to stage or\n" +
			"publish the volume makes it.",
		ArgsUsage: "VOLUME",
		Flags: []cli.Flag{addressFlag(), secretFlag(), jsonFlag,
			&cli.StringFlag{Name: "capacity-min", Usage: `the least size wanted, such as "20GiB" (required)`},
			&cli.StringFlag{Name: "capacity-max", Usage: "the most size wanted"}},
		Action: volumeExpand,
	}
}

func volumeExpand(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "volume expand takes exactly one volume ID")
	}
	if c.String("capacity-min") == "" {
		return usageError(c, "volume expand needs -capacity-min")
	}
	secrets, err := kvFrom(c, "secret")
	if err != nil {
		return err
	}
	req := &pb.VolumeExpandRequest{Secrets: secrets}
	if req.CapacityMinBytes, err = volumespec.ParseBytes(c.String("capacity-min")); err != nil {
		return usageError(c, "-capacity-min: %v", err)
	}
	if s := c.String("capacity-max"); s != "" {
		if req.CapacityMaxBytes, err = volumespec.ParseBytes(s); err != nil {
			return usageError(c, "-capacity-max: %v", err)
		}
		if req.CapacityMaxBytes < req.CapacityMinBytes {
			return usageError(c, "-capacity-max %s is less than -capacity-min %s", s, c.String("capacity-min"))
		}
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	if req.VolumeId, err = findVolume(c, client, c.Args().First()); err != nil {
		return err
	}
	resp, err := client.Volumes().Expand(c.Context, req)
	if err != nil {
		return err
	}
	failed := 0
	for _, n := range resp.GetNodes() {
		if n.GetError() != "" {
			failed++
		}
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, resp); err != nil {
			return err
		}
	} else if err := printExpand(c, req.GetVolumeId(), resp); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("volume %q: node expansion failed on %d of %d nodes; its recorded capacity stays %s (run volume expand again to retry)",
			req.GetVolumeId(), failed, len(resp.GetNodes()), units.Bytes(uint64(resp.GetRecordedCapacityBytes())))
	}
	return nil
}

// printExpand shows the plugin's answer and, after a node expansion, one
// row per node: its answer, its error, or "not held" (the node no longer
// holds the volume: nothing to expand there, not a failure).
func printExpand(c *cli.Context, volumeID string, resp *pb.VolumeExpandResponse) error {
	w := c.App.Writer
	fmt.Fprintf(w, "Volume %q expanded to %s by its plugin\n", volumeID, units.Bytes(uint64(resp.GetCapacityBytes())))
	if !resp.GetNodeExpansionRequired() {
		return nil
	}
	if len(resp.GetNodes()) == 0 {
		fmt.Fprintln(w, "Node expansion (NodeExpandVolume): no node holds the volume staged or published")
	} else {
		fmt.Fprintln(w, "Node expansion (NodeExpandVolume):")
		tw := newTable(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "Node ID\tCapacity\tResult")
		for _, n := range resp.GetNodes() {
			capacity, result := "-", "expanded"
			if n.GetCapacityBytes() > 0 {
				capacity = units.Bytes(uint64(n.GetCapacityBytes()))
			}
			switch {
			case n.GetError() != "":
				result = "error: " + n.GetError()
			case n.GetNotHeld():
				// Torn down there meanwhile: nothing to expand.
				result = "not held"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", n.GetNodeId(), capacity, result)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "Recorded capacity: %s\n", units.Bytes(uint64(resp.GetRecordedCapacityBytes())))
	if p := resp.GetNodeExpansionPendingBytes(); p > 0 && err == nil {
		_, err = fmt.Fprintf(w, "Node expansion to %s pending: made by the next node that stages or publishes the volume\n", units.Bytes(uint64(p)))
	}
	return err
}
