package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

func allocCommand() *cli.Command {
	return &cli.Command{
		Name:  "alloc",
		Usage: "inspect and act on allocations",
		Subcommands: []*cli.Command{
			{
				Name:      "status",
				Usage:     "show an allocation (by ID or unique prefix): its tasks' states and events",
				ArgsUsage: "ALLOC",
				Flags:     readFlags(),
				Action:    allocStatus,
			},
			{
				Name:      "logs",
				Usage:     "print a task's stdout (or stderr); -f follows it until the task ends",
				ArgsUsage: "ALLOC [TASK]",
				Flags: []cli.Flag{addressFlag(),
					&cli.BoolFlag{Name: "f", Usage: "follow: keep printing what the task writes; exits once the task is dead and its log printed"},
					&cli.BoolFlag{Name: "stderr", Usage: "print stderr instead of stdout"},
					&cli.BoolFlag{Name: "tail", Usage: "start from the end of the log (with -c: that many bytes before it)"},
					&cli.Int64Flag{Name: "c", Usage: "byte offset: from the start, or with -tail from the end"},
				},
				Action: allocLogs,
			},
			{
				Name:      "stop",
				Usage:     "stop an allocation; the scheduler replaces it unless -no-replace",
				ArgsUsage: "ALLOC",
				Flags: []cli.Flag{addressFlag(),
					&cli.BoolFlag{Name: "detach", Usage: "print the evaluation ID and return instead of following it"},
					&cli.BoolFlag{Name: "no-replace", Usage: "stop it without placing a replacement"}},
				Action: allocStop,
			},
			{
				Name:      "restart",
				Usage:     "restart an allocation's tasks (or one task) in place",
				ArgsUsage: "ALLOC [TASK]",
				Flags:     []cli.Flag{addressFlag()},
				Action:    allocRestart,
			},
		},
	}
}

// findAlloc resolves an alloc ID or unique prefix (findID) and reads it.
func findAlloc(c *cli.Context, client *api.Client, prefix string) (*pb.Allocation, error) {
	id, err := findID(c.Context, "alloc", prefix, client.Allocations().List, (*pb.Allocation).GetId)
	if err != nil {
		return nil, err
	}
	a, _, err := client.Allocations().Info(c.Context, id, nil)
	return a, err
}

func allocStatus(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "alloc status takes exactly one alloc ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	a, err := findAlloc(c, client, c.Args().First())
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, a)
	}
	return printAlloc(c.App.Writer, a)
}

func printAlloc(w io.Writer, a *pb.Allocation) error {
	rows := [][2]string{
		{"ID", a.GetId()},
		{"Eval ID", shortID(a.GetEvalId())},
		{"Name", a.GetName()},
		{"Node ID", shortID(a.GetNodeId())},
		{"Node Name", a.GetNodeName()},
		{"Job ID", a.GetJobId()},
		{"Job Version", fmt.Sprint(a.GetJobVersion())},
		{"Client Status", pb.EnumWord(a.GetClientStatus())},
		{"Client Description", orNone(a.GetClientDescription())},
		{"Desired Status", pb.EnumWord(a.GetDesiredStatus())},
		{"Desired Description", orNone(a.GetDesiredDescription())},
		{"Created", formatNanos(a.GetCreatedAt())},
		{"Modified", formatNanos(a.GetModifiedAt())},
	}
	if p := a.GetPreviousAllocation(); p != "" {
		rows = append(rows, [2]string{"Replaces", shortID(p)})
	}
	if n := a.GetNextAllocation(); n != "" {
		rows = append(rows, [2]string{"Replaced By", shortID(n)})
	}
	if f := a.GetFollowupEvalId(); f != "" {
		rows = append(rows, [2]string{"Reschedule Eval", shortID(f)})
	}
	printKV(w, rows)

	for _, name := range sortedKeys(a.GetTaskStates()) {
		ts := a.GetTaskStates()[name]
		fmt.Fprintf(w, "\nTask %q is %q\n", name, pb.EnumWord(ts.GetState()))
		if r := a.GetResources().GetTasks()[name]; r != nil {
			tw := newTable(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "Task Resources:")
			fmt.Fprintln(tw, "CPU\tMemory")
			fmt.Fprintf(tw, "%d MHz\t%d MiB\n", r.GetCpuMhz(), r.GetMemoryMb())
			_ = tw.Flush()
			fmt.Fprintln(w)
		}
		printKV(w, [][2]string{
			{"Started At", formatNanos(ts.GetStartedAt())},
			{"Finished At", formatNanos(ts.GetFinishedAt())},
			{"Total Restarts", fmt.Sprint(ts.GetRestarts())},
			{"Last Restart", formatNanos(ts.GetLastRestartAt())},
			{"Failed", fmt.Sprint(ts.GetFailed())},
		})
		events := slices.Clone(ts.GetEvents())
		if len(events) == 0 {
			continue
		}
		fmt.Fprintln(w, "\nRecent Events:")
		tw := newTable(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "Time\tType\tDescription")
		// Newest first, as Nomad shows them: the last thing that happened
		// is what the reader looks for.
		slices.Reverse(events)
		for _, ev := range events {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", formatEventTime(ev.GetOccurredAt()), ev.GetType(), eventText(ev))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// formatEventTime shows milliseconds: a task's events are often within
// one second of each other.
func formatEventTime(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return formatNanosMillis(ns)
}

func allocLogs(c *cli.Context) error {
	if c.NArg() < 1 || c.NArg() > 2 {
		return usageError(c, "alloc logs takes an alloc ID and optionally a task name")
	}
	if c.Int64("c") < 0 {
		return usageError(c, "-c must not be negative")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	a, err := findAlloc(c, client, c.Args().First())
	if err != nil {
		return err
	}
	task := c.Args().Get(1)
	if err := checkTask(a, task); err != nil {
		return err
	}
	rc, err := client.Allocations().Logs(c.Context, a.GetId(), api.LogsOptions{
		Task: task, Stderr: c.Bool("stderr"), Follow: c.Bool("f"), FromEnd: c.Bool("tail"), Offset: c.Int64("c"),
	})
	if err != nil {
		return fmt.Errorf("reading the logs of alloc %s: %w", a.GetId(), err)
	}
	defer rc.Close()
	if _, err := io.Copy(c.App.Writer, rc); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("the log stream of alloc %s broke off: %w", a.GetId(), err)
		}
		return err
	}
	return nil
}

// checkTask refuses a task the alloc does not have, naming the ones it
// has, before asking the alloc's client.
func checkTask(a *pb.Allocation, task string) error {
	states := a.GetTaskStates()
	if task == "" || len(states) == 0 {
		return nil
	}
	if _, ok := states[task]; ok {
		return nil
	}
	return fmt.Errorf("alloc %s has no task %q; its tasks: %s", a.GetId(), task, strings.Join(sortedKeys(states), ", "))
}

func allocStop(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "alloc stop takes exactly one alloc ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	id, err := findID(c.Context, "alloc", c.Args().First(), client.Allocations().List, (*pb.Allocation).GetId)
	if err != nil {
		return err
	}
	resp, err := client.Allocations().Stop(c.Context, id, c.Bool("no-replace"))
	if err != nil {
		return fmt.Errorf("stopping alloc %s: %w", id, err)
	}
	// A replacement is placed by the evaluation: follow it to running.
	return followWrite(c, client, resp.GetEvalId(), resp.GetMeta().GetIndex(), nil, !c.Bool("no-replace"))
}

func allocRestart(c *cli.Context) error {
	if c.NArg() < 1 || c.NArg() > 2 {
		return usageError(c, "alloc restart takes an alloc ID and optionally a task name")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	a, err := findAlloc(c, client, c.Args().First())
	if err != nil {
		return err
	}
	task := c.Args().Get(1)
	if err := checkTask(a, task); err != nil {
		return err
	}
	if err := client.Allocations().Restart(c.Context, a.GetId(), task); err != nil {
		return fmt.Errorf("restarting alloc %s: %w", a.GetId(), err)
	}
	if task != "" {
		_, err = fmt.Fprintf(c.App.Writer, "Restarted task %q of allocation %q\n", task, shortID(a.GetId()))
	} else {
		_, err = fmt.Fprintf(c.App.Writer, "Restarted allocation %q\n", shortID(a.GetId()))
	}
	return err
}
