package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/pb"
)

// Exit codes of job plan, as Nomad's: scripts branch on them, and 1
// means changes, so errors are 255. A usage error exits with exitUsage,
// as every command's does.
const (
	planNoChange = 0
	planChanges  = 1
	planError    = 255
)

func jobPlan(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "job plan takes exactly one job file")
	}
	file := c.Args().First()
	job, err := readJobFile(file, c.App.Reader)
	if err != nil {
		return exitWith(planError, err)
	}
	client, err := apiClient(c)
	if err != nil {
		return exitWith(planError, err)
	}
	resp, err := client.Jobs().Plan(c.Context, job)
	if err != nil {
		return exitWith(planError, fmt.Errorf("planning job %s: %w", job.GetId(), err))
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, resp); err != nil {
			return exitWith(planError, err)
		}
	} else {
		printPlan(c.App.Writer, job, resp, file)
	}
	if code := planExitCode(resp); code != planNoChange {
		return silentExit(code)
	}
	return nil
}

// planExitCode is 1 when the plan creates or destroys allocations
// (in-place updates and ignored allocs change nothing that runs).
func planExitCode(resp *pb.JobPlanResponse) int {
	if resp.GetDiffType() == "none" {
		return planNoChange
	}
	for _, g := range resp.GetGroups() {
		u := g.GetUpdates()
		if u.GetPlace()+u.GetStop()+u.GetMigrate()+u.GetDestructiveUpdate()+u.GetCanary()+u.GetLost()+u.GetReschedule() > 0 {
			return planChanges
		}
	}
	return planNoChange
}

func diffMarker(diffType string) string {
	switch diffType {
	case "added":
		return "+ "
	case "deleted":
		return "- "
	case "edited":
		return "+/- "
	}
	return ""
}

func printPlan(w io.Writer, job *pb.Job, resp *pb.JobPlanResponse, file string) {
	fmt.Fprintf(w, "%sJob: %q\n", diffMarker(resp.GetDiffType()), job.GetId())
	for _, f := range resp.GetFields() {
		fmt.Fprintf(w, "  %s\n", f)
	}
	for _, g := range resp.GetGroups() {
		fmt.Fprintf(w, "%sTask Group: %q", diffMarker(g.GetType()), g.GetName())
		if counts := annotationCounts(g.GetUpdates()); counts != "" {
			fmt.Fprintf(w, " (%s)", counts)
		}
		fmt.Fprintln(w)
		for _, f := range g.GetFields() {
			fmt.Fprintf(w, "      %s\n", f)
		}
	}

	fmt.Fprintln(w, "\nScheduler dry-run:")
	if len(resp.GetFailedTgAllocs()) == 0 {
		fmt.Fprintln(w, "- All tasks successfully allocated.")
	} else {
		fmt.Fprintln(w, "- WARNING: Failed to place all allocations.")
		printPlacementFailures(w, "  ", resp.GetFailedTgAllocs())
	}
	if len(resp.GetWarnings()) > 0 {
		fmt.Fprintln(w, "\nJob Warnings:")
		for _, warn := range resp.GetWarnings() {
			fmt.Fprintf(w, "* %s\n", warn)
		}
	}

	fmt.Fprintf(w, "\nJob Modify Index: %d\n", resp.GetJobModifyIndex())
	fmt.Fprintf(w, "To submit the job with version verification run:\n\nberth job run -check-index %d %s\n\n", resp.GetJobModifyIndex(), file)
	fmt.Fprintln(w, `When running the job with the check-index flag, the job will only be run if the
job modify index given matches the server-side version. If the index has
changed, another user has modified the job and the plan's results are
potentially invalid.`)
}

// annotationCounts is "1 create, 2 in-place update", in Nomad's order and
// words, leaving out zeros.
func annotationCounts(u *pb.PlanAnnotation) string {
	var parts []string
	for _, c := range []struct {
		n    int32
		word string
	}{
		{u.GetPlace(), "create"},
		{u.GetStop(), "destroy"},
		{u.GetMigrate(), "migrate"},
		{u.GetInPlaceUpdate(), "in-place update"},
		{u.GetDestructiveUpdate(), "create/destroy update"},
		{u.GetCanary(), "canary"},
		{u.GetLost(), "lost"},
		{u.GetReschedule(), "reschedule"},
		{u.GetIgnore(), "ignore"},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.word))
		}
	}
	return strings.Join(parts, ", ")
}
