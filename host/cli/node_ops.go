package cli

import (
	"bufio"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/pb"
)

func nodeDrainCommand() *cli.Command {
	return &cli.Command{
		Name:      "drain",
		Usage:     "move a node's allocations off it (-enable) or end a drain (-disable)",
		ArgsUsage: "NODE",
		Flags: []cli.Flag{addressFlag(),
			&cli.BoolFlag{Name: "enable", Usage: "start draining the node"},
			&cli.BoolFlag{Name: "disable", Usage: "end the node's drain and make it eligible again (unless -keep-ineligible)"},
			&cli.DurationFlag{Name: "deadline", Value: time.Hour, Usage: "allocs still on the node when it passes are stopped at once"},
			&cli.BoolFlag{Name: "no-deadline", Usage: "wait for the allocs to move however long it takes"},
			&cli.BoolFlag{Name: "force", Usage: "stop every alloc at once"},
			&cli.BoolFlag{Name: "ignore-system", Usage: "leave system jobs' allocs running"},
			&cli.BoolFlag{Name: "keep-ineligible", Usage: "with -disable: leave the node ineligible"},
			&cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation"},
		},
		Action: nodeDrain,
	}
}

func nodeEligibilityCommand() *cli.Command {
	return &cli.Command{
		Name:      "eligibility",
		Usage:     "let the scheduler place new allocations on a node (-enable) or not (-disable)",
		ArgsUsage: "NODE",
		Flags: []cli.Flag{addressFlag(),
			&cli.BoolFlag{Name: "enable", Usage: "make the node eligible"},
			&cli.BoolFlag{Name: "disable", Usage: "make the node ineligible (its allocs keep running)"}},
		Action: nodeEligibility,
	}
}

// enableDisable reads the -enable/-disable pair, exactly one of which
// must be given.
func enableDisable(c *cli.Context) (bool, error) {
	if c.Bool("enable") == c.Bool("disable") {
		return false, usageError(c, "give exactly one of -enable and -disable")
	}
	return c.Bool("enable"), nil
}

func nodeDrain(c *cli.Context) error {
	enable, err := enableDisable(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return usageError(c, "node drain takes exactly one node ID")
	}
	if c.Bool("force") && c.Bool("no-deadline") {
		return usageError(c, "-force and -no-deadline contradict each other")
	}
	if !enable && (c.IsSet("deadline") || c.Bool("force") || c.Bool("no-deadline") || c.Bool("ignore-system")) {
		return usageError(c, "-deadline, -force, -no-deadline and -ignore-system set up a drain; they go with -enable")
	}
	if c.IsSet("deadline") && c.Duration("deadline") <= 0 {
		return usageError(c, "-deadline must be positive; use -no-deadline or -force")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	node, err := findNode(c, client, c.Args().First())
	if err != nil {
		return err
	}
	if !enable {
		if _, err := client.NodeOps().Drain(c.Context, node.GetId(), nil, !c.Bool("keep-ineligible")); err != nil {
			return fmt.Errorf("ending the drain of node %s: %w", node.GetId(), err)
		}
		_, err = fmt.Fprintf(c.App.Writer, "Node %q drain strategy unset\n", shortID(node.GetId()))
		return err
	}
	if !c.Bool("yes") {
		ok, err := confirm(c, fmt.Sprintf("Are you sure you want to enable drain mode for node %q (%s)? [y/N] ", shortID(node.GetId()), node.GetName()))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("drain of node %s not started: not confirmed (answer y, or pass -yes)", node.GetId())
		}
	}
	strategy := &pb.DrainStrategy{DeadlineMs: c.Duration("deadline").Milliseconds(), IgnoreSystemJobs: c.Bool("ignore-system")}
	switch {
	case c.Bool("force"):
		strategy.DeadlineMs = -1
	case c.Bool("no-deadline"):
		strategy.DeadlineMs = 0
	}
	if _, err := client.NodeOps().Drain(c.Context, node.GetId(), strategy, false); err != nil {
		return fmt.Errorf("draining node %s: %w", node.GetId(), err)
	}
	_, err = fmt.Fprintf(c.App.Writer, "Node %q drain strategy set\n", shortID(node.GetId()))
	return err
}

// confirm asks a yes/no question on the app's input; anything but y or
// yes, end of input included, is no.
func confirm(c *cli.Context, question string) (bool, error) {
	if _, err := fmt.Fprint(c.App.Writer, question); err != nil {
		return false, err
	}
	line, err := bufio.NewReader(c.App.Reader).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(c.App.Writer)
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

func nodeEligibility(c *cli.Context) error {
	enable, err := enableDisable(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return usageError(c, "node eligibility takes exactly one node ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	node, err := findNode(c, client, c.Args().First())
	if err != nil {
		return err
	}
	if _, err := client.NodeOps().Eligibility(c.Context, node.GetId(), enable); err != nil {
		return fmt.Errorf("setting the eligibility of node %s: %w", node.GetId(), err)
	}
	_, err = fmt.Fprintf(c.App.Writer, "Node %q scheduling eligibility set: %s for scheduling\n", shortID(node.GetId()), pick(enable, "eligible", "ineligible"))
	return err
}

func nodeFenceCommand() *cli.Command {
	return &cli.Command{
		Name:  "fence",
		Usage: "say a down node is off, so its volume claims are released now rather than after force_detach_after (-unfence lifts it)",
		Description: "A fenced node takes no placements and no volume claims, and its volumes are detached through their controllers at once.\n" +
			"Fence only a node that is really off (powered down, or cut from its storage): a node that still runs could keep writing\n" +
			"to a volume another node then mounts. The servers refuse to fence a node they see as ready.",
		ArgsUsage: "NODE",
		Flags: []cli.Flag{addressFlag(),
			&cli.BoolFlag{Name: "unfence", Usage: "lift the fence: the node may take placements and claims again"},
			&cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation"},
		},
		Action: nodeFence,
	}
}

func nodeFence(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "node fence takes exactly one node ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	node, err := findNode(c, client, c.Args().First())
	if err != nil {
		return err
	}
	fence := !c.Bool("unfence")
	if fence && !c.Bool("yes") {
		ok, err := confirm(c, fmt.Sprintf("Is node %q (%s) off? Fencing it releases its volumes for other nodes. [y/N] ", shortID(node.GetId()), node.GetName()))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("node %s not fenced: not confirmed (answer y, or pass -yes)", node.GetId())
		}
	}
	if _, err := client.NodeOps().Fence(c.Context, node.GetId(), fence); err != nil {
		return fmt.Errorf("%s node %s: %w", pick(fence, "fencing", "lifting the fence of"), node.GetId(), err)
	}
	_, err = fmt.Fprintf(c.App.Writer, "Node %q %s\n", shortID(node.GetId()), pick(fence, "fenced: its volume claims are being released", "unfenced"))
	return err
}
