package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

func operatorCommand() *cli.Command {
	return &cli.Command{
		Name:  "operator",
		Usage: "cluster operations: raft peers, snapshots",
		Subcommands: []*cli.Command{
			{
				Name:  "raft",
				Usage: "inspect the raft configuration",
				Subcommands: []*cli.Command{{
					Name:   "list-peers",
					Usage:  "list the raft peers",
					Flags:  readFlags(&cli.BoolFlag{Name: "stale", Usage: "answer from the receiving server without asking the leader"}),
					Action: raftListPeers,
				}},
			},
			{
				Name:  "snapshot",
				Usage: "save or restore the cluster state",
				Subcommands: []*cli.Command{
					{
						Name:      "save",
						Usage:     "save a snapshot of the cluster state to FILE",
						ArgsUsage: "FILE",
						Flags:     []cli.Flag{addressFlag()},
						Action:    snapshotSave,
					},
					{
						Name:      "restore",
						Usage:     "replace the cluster state with the snapshot in FILE",
						ArgsUsage: "FILE",
						Flags:     []cli.Flag{addressFlag()},
						Action:    snapshotRestore,
					},
				},
			},
		},
	}
}

func raftListPeers(c *cli.Context) error {
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	servers, _, err := api.AllPages(c.Context, &api.QueryOptions{Consistent: !c.Bool("stale"), PerPage: listPerPage},
		func(ctx context.Context, q *api.QueryOptions) ([]*pb.RaftServer, *api.QueryMeta, error) {
			conf, meta, err := client.RaftConfiguration(ctx, q)
			return conf.GetServers(), meta, err
		})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSONList(c.App.Writer, servers)
	}
	// The API lists by ID; people look servers up by name.
	slices.SortStableFunc(servers, func(a, b *pb.RaftServer) int { return strings.Compare(a.GetName(), b.GetName()) })
	tw := newTable(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Node\tID\tAddress\tRPC Address\tState\tVoter")
	for _, s := range servers {
		state := "follower"
		if s.GetLeader() {
			state = "leader"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\n", s.GetName(), s.GetId(), s.GetRaftAddr(), s.GetRpcAddr(), state, s.GetVoter())
	}
	return tw.Flush()
}

func snapshotSave(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "snapshot save takes exactly one FILE")
	}
	path := c.Args().First()
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	// Write beside the target and rename, so an interrupted save never
	// leaves a truncated file under the requested name.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".berth-snapshot-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := client.SnapshotSave(c.Context, tmp)
	if err != nil {
		tmp.Close()
		return fmt.Errorf("saving snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "Saved snapshot (%d bytes) to %s\n", n, path)
	return err
}

func snapshotRestore(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "snapshot restore takes exactly one FILE")
	}
	f, err := os.Open(c.Args().First())
	if err != nil {
		return err
	}
	defer f.Close()
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	resp, err := client.SnapshotRestore(c.Context, f)
	if err != nil {
		return fmt.Errorf("restoring snapshot %s: %w", c.Args().First(), err)
	}
	_, err = fmt.Fprintf(c.App.Writer, "Restored snapshot %s; cluster state now at index %d\n", c.Args().First(), resp.GetMeta().GetIndex())
	return err
}
