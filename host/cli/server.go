package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

func serverCommand() *cli.Command {
	return &cli.Command{
		Name:  "server",
		Usage: "inspect and manage the servers",
		Subcommands: []*cli.Command{
			{
				Name:   "members",
				Usage:  "list the servers and whether they are alive",
				Flags:  readFlags(),
				Action: serverMembers,
			},
			{
				Name:      "force-leave",
				Usage:     "remove a server from the raft configuration",
				ArgsUsage: "NAME|ID|RPC_ADDRESS",
				Flags:     []cli.Flag{addressFlag()},
				Action:    serverForceLeave,
			},
		},
	}
}

func serverMembers(c *cli.Context) error {
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	members, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage}, client.Members)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSONList(c.App.Writer, members)
	}
	// The API lists by ID; people look servers up by name.
	slices.SortStableFunc(members, func(a, b *pb.Member) int { return strings.Compare(a.GetServer().GetName(), b.GetServer().GetName()) })
	tw := newTable(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Name\tID\tRPC Address\tRaft Address\tStatus\tLeader\tVoter\tVersion")
	for _, m := range members {
		s := m.GetServer()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%t\t%s\n", s.GetName(), shortID(s.GetId()), s.GetRpcAddr(), s.GetRaftAddr(),
			memberStatus(m.GetStatus()), m.GetLeader(), m.GetVoter(), s.GetVersion())
	}
	return tw.Flush()
}

func memberStatus(s pb.MemberStatus) string { return pb.EnumWord(s) }

func serverForceLeave(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "force-leave takes exactly one server name, id or RPC address")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	resp, err := client.RemovePeer(c.Context, c.Args().First())
	if err != nil {
		return fmt.Errorf("removing server %q: %w", c.Args().First(), err)
	}
	_, err = fmt.Fprintf(c.App.Writer, "Removed server %s from the cluster\n", resp.GetRemovedId())
	return err
}

// shortID abbreviates a UUID for tables.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
