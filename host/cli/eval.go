package cli

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "inspect evaluations",
		Subcommands: []*cli.Command{
			{
				Name:      "status",
				Usage:     "show an evaluation (by ID or unique prefix) and why it could not place allocations",
				ArgsUsage: "EVAL",
				Flags:     readFlags(),
				Action:    evalStatus,
			},
			{
				Name:  "list",
				Usage: "list evaluations",
				Flags: readFlags(
					&cli.StringFlag{Name: "job", Usage: "only the evaluations of this job ID"},
					&cli.StringFlag{Name: "status", Usage: "only evaluations with this status (pending, blocked, complete, failed, canceled); " +
						"blocked includes one the leader has woken to run again and not yet planned"}),
				Action: evalList,
			},
		},
	}
}

func evalStatus(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "eval status takes exactly one evaluation ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	id, err := findID(c.Context, "evaluation", c.Args().First(), client.Evaluations().List, (*pb.Evaluation).GetId)
	if err != nil {
		return err
	}
	e, _, err := client.Evaluations().Info(c.Context, id, nil)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, e)
	}
	return printEval(c.App.Writer, e)
}

func printEval(w io.Writer, e *pb.Evaluation) error {
	rows := [][2]string{
		{"ID", e.GetId()},
		{"Create Time", formatNanos(e.GetCreatedAt())},
		{"Modify Time", formatNanos(e.GetModifiedAt())},
		{"Status", pb.EnumWord(e.GetStatus())},
		{"Status Description", orNone(e.GetStatusDescription())},
		{"Type", pb.EnumWord(e.GetType())},
		{"Triggered By", pb.EnumWord(e.GetTriggeredBy())},
		{"Job ID", e.GetJobId()},
		{"Priority", fmt.Sprint(e.GetPriority())},
		{"Placement Failures", fmt.Sprint(len(e.GetFailedTgAllocs()) > 0)},
	}
	if n := e.GetNodeId(); n != "" {
		rows = append(rows, [2]string{"Node ID", shortID(n)})
	}
	if wu := e.GetWaitUntil(); wu != 0 {
		rows = append(rows, [2]string{"Wait Until", formatNanos(wu)})
	}
	for _, link := range [][2]string{{"Previous Eval", e.GetPreviousEval()}, {"Next Eval", e.GetNextEval()}, {"Blocked Eval", e.GetBlockedEval()}} {
		if link[1] != "" {
			rows = append(rows, [2]string{link[0], shortID(link[1])})
		}
	}
	printKV(w, rows)
	if pa := e.GetPlanAnnotations(); len(pa) > 0 {
		fmt.Fprintln(w, "\nPlan")
		for _, g := range sortedKeys(pa) {
			fmt.Fprintf(w, "Task Group %q: %s\n", g, orNone(annotationCounts(pa[g])))
		}
	}
	if len(e.GetFailedTgAllocs()) > 0 {
		fmt.Fprintln(w, "\nFailed Placements")
		printPlacementFailures(w, "", e.GetFailedTgAllocs())
		if q := e.GetQueuedAllocations(); len(q) > 0 {
			for _, g := range sortedKeys(q) {
				fmt.Fprintf(w, "Task Group %q: %d queued\n", g, q[g])
			}
		}
	}
	return nil
}

func evalList(c *cli.Context) error {
	if c.NArg() != 0 {
		return usageError(c, "eval list takes no arguments")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	params := map[string]string{}
	if j := c.String("job"); j != "" {
		params["job"] = j
	}
	if s := c.String("status"); s != "" {
		params["status"] = s
	}
	evals, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage, Params: params}, client.Evaluations().List)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSONList(c.App.Writer, evals)
	}
	if len(evals) == 0 {
		_, err := fmt.Fprintln(c.App.Writer, "No evaluations found")
		return err
	}
	tw := newTable(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPriority\tTriggered By\tJob ID\tNode ID\tStatus\tPlacement Failures")
	for _, e := range evals {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%t\n", shortID(e.GetId()), e.GetPriority(), pb.EnumWord(e.GetTriggeredBy()),
			e.GetJobId(), orDash(shortID(e.GetNodeId())), pb.EnumWord(e.GetStatus()), len(e.GetFailedTgAllocs()) > 0)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
