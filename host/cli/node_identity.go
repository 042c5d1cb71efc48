package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/pb"
)

// nodeReadmitCommand is `berth node readmit NODE`: the servers refuse the
// registration of a node that lost the secret it was admitted with (its state
// DB was wiped); readmit clears the stored secret so the node's next
// registration sets a new one. The name follows what the refusal
// tells the operator; Nomad has no such step because its clients make
// their own secret.
func nodeReadmitCommand() *cli.Command {
	return &cli.Command{
		Name:      "readmit",
		Usage:     "let a node that lost its state register again: clear its stored secret so its next registration sets a new one",
		ArgsUsage: "NODE",
		Description: "The servers admit each node's secret at its first registration and refuse its calls without it.\n" +
			"A node whose state DB was lost no longer has it and is refused; readmit clears the stored secret,\n" +
			"so the node's next registration sets a new one. Readmit only a node you know is the machine\n" +
			"it claims to be: until it registers again, the servers check no secret for it.",
		Flags:  []cli.Flag{addressFlag()},
		Action: nodeReadmit,
	}
}

func nodeReadmit(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "node readmit takes exactly one node ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	node, err := findNode(c, client, c.Args().First())
	if err != nil {
		return err
	}
	if _, err := client.NodeOps().Readmit(c.Context, node.GetId()); err != nil {
		return fmt.Errorf("readmitting node %s: %w", node.GetId(), err)
	}
	_, err = fmt.Fprintf(c.App.Writer, "Node %q readmitted: its next registration sets a new secret\n", shortID(node.GetId()))
	return err
}

// identityText is node status's Identity: whether the node's calls are
// authenticated by a node secret (the servers' has_secret), and if not,
// why and what to do.
func identityText(n *pb.Node) string {
	switch {
	case n.GetHasSecret():
		return "secret"
	case n.GetReadmitted():
		return "none (re-admitted: its next registration sets its secret)"
	}
	return "none (calls for it are not authenticated; run its client at 0.1.0-dev.4 or later; strict node_identity_enforcement refuses it)"
}
