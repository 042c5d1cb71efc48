package cli

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// latestEvals is how many evaluations `job status JOB` shows.
const latestEvals = 5

func jobStatus(c *cli.Context) error {
	if c.NArg() > 1 {
		return usageError(c, "job status takes at most one job ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	if c.NArg() == 0 {
		jobs, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage}, client.Jobs().List)
		if err != nil {
			return err
		}
		if c.Bool("json") {
			return printJSONList(c.App.Writer, jobs)
		}
		return printJobTable(c.App.Writer, jobs)
	}
	id, err := findJob(c, client, c.Args().First())
	if err != nil {
		return err
	}
	job, _, err := client.Jobs().Info(c.Context, id, nil)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, job)
	}
	summary, _, err := client.Jobs().Summary(c.Context, id, nil)
	if err != nil {
		return err
	}
	allocs, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage}, func(ctx context.Context, q *api.QueryOptions) ([]*pb.Allocation, *api.QueryMeta, error) {
		return client.Jobs().Allocations(ctx, id, q)
	})
	if err != nil {
		return err
	}
	evals, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage}, func(ctx context.Context, q *api.QueryOptions) ([]*pb.Evaluation, *api.QueryMeta, error) {
		return client.Jobs().Evaluations(ctx, id, q)
	})
	if err != nil {
		return err
	}
	return printJob(c.App.Writer, job, summary, allocs, evals)
}

func printJobTable(w io.Writer, jobs []*pb.JobListStub) error {
	if len(jobs) == 0 {
		_, err := fmt.Fprintln(w, "No jobs registered")
		return err
	}
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tType\tPriority\tStatus\tVersion\tSubmit Date")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", j.GetId(), pb.EnumWord(j.GetType()), j.GetPriority(), jobStatusWord(j.GetStatus(), j.GetStop()), j.GetVersion(), formatNanos(j.GetSubmittedAt()))
	}
	return tw.Flush()
}

// jobStatusWord shows a stopped job whose allocs still run as "running
// (stopping)", so it does not read as a job that runs on.
func jobStatusWord(s pb.JobStatus, stop bool) string {
	if stop && s != pb.JobStatus_JOB_STATUS_DEAD {
		return pb.EnumWord(s) + " (stopping)"
	}
	return pb.EnumWord(s)
}

func printJob(w io.Writer, job *pb.Job, summary *pb.JobSummary, allocs []*pb.Allocation, evals []*pb.Evaluation) error {
	printKV(w, [][2]string{
		{"ID", job.GetId()},
		{"Name", job.GetName()},
		{"Submit Date", formatNanos(job.GetSubmittedAt())},
		{"Type", pb.EnumWord(job.GetType())},
		{"Priority", fmt.Sprint(job.GetPriority())},
		{"Status", jobStatusWord(job.GetStatus(), job.GetStop())},
		{"Version", fmt.Sprint(job.GetVersion())},
		{"Modify Index", fmt.Sprint(job.GetJobModifyIndex())},
	})

	fmt.Fprintln(w, "\nSummary")
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Task Group\tQueued\tPending\tRunning\tFailed\tComplete\tLost")
	for _, g := range sortedKeys(summary.GetGroups()) {
		s := summary.GetGroups()[g]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", g, s.GetQueued(), s.GetPending(), s.GetRunning(), s.GetFailed(), s.GetComplete(), s.GetLost())
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	// Newest first: the evaluation that decides what runs now leads.
	slices.SortFunc(evals, func(a, b *pb.Evaluation) int { return cmpDesc(a.GetCreateIndex(), b.GetCreateIndex()) })
	if len(evals) > 0 && len(evals[0].GetFailedTgAllocs()) > 0 {
		fmt.Fprintln(w, "\nPlacement Failure")
		printPlacementFailures(w, "", evals[0].GetFailedTgAllocs())
	}
	if len(evals) > 0 {
		fmt.Fprintln(w, "\nLatest Evaluations")
		tw = newTable(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPriority\tTriggered By\tStatus\tPlacement Failures")
		for _, e := range evals[:min(len(evals), latestEvals)] {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%t\n", shortID(e.GetId()), e.GetPriority(), pb.EnumWord(e.GetTriggeredBy()), pb.EnumWord(e.GetStatus()), len(e.GetFailedTgAllocs()) > 0)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "\nAllocations")
	if len(allocs) == 0 {
		_, err := fmt.Fprintln(w, "No allocations placed")
		return err
	}
	return printAllocTable(w, allocs)
}

// printAllocTable lists allocs newest first.
func printAllocTable(w io.Writer, allocs []*pb.Allocation) error {
	slices.SortFunc(allocs, func(a, b *pb.Allocation) int { return cmpDesc(a.GetCreateIndex(), b.GetCreateIndex()) })
	tw := newTable(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNode ID\tTask Group\tVersion\tDesired\tStatus\tCreated\tModified")
	for _, a := range allocs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", shortID(a.GetId()), shortID(a.GetNodeId()), a.GetTaskGroup(), a.GetJobVersion(),
			pb.EnumWord(a.GetDesiredStatus()), pb.EnumWord(a.GetClientStatus()), formatNanos(a.GetCreatedAt()), formatNanos(a.GetModifiedAt()))
	}
	return tw.Flush()
}

func cmpDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// printKV prints "Key = value" rows aligned, as node status does.
func printKV(w io.Writer, rows [][2]string) {
	tw := newTable(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t= %s\n", r[0], r[1])
	}
	_ = tw.Flush()
}

func jobHistory(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "job history takes exactly one job ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	id, err := findJob(c, client, c.Args().First())
	if err != nil {
		return err
	}
	versions, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage},
		func(ctx context.Context, q *api.QueryOptions) ([]*pb.Job, *api.QueryMeta, error) {
			return client.Jobs().Versions(ctx, id, q)
		})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSONList(c.App.Writer, versions)
	}
	for i, v := range versions {
		if i > 0 {
			fmt.Fprintln(c.App.Writer)
		}
		printKV(c.App.Writer, [][2]string{
			{"Version", fmt.Sprint(v.GetVersion())},
			{"Stop", fmt.Sprint(v.GetStop())},
			{"Submit Date", formatNanos(v.GetSubmittedAt())},
			{"Groups", groupCounts(v)},
		})
	}
	return nil
}

// groupCounts is "web x3, db x1".
func groupCounts(j *pb.Job) string {
	var out string
	for i, g := range j.GetGroups() {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s x%d", g.GetName(), g.GetCount())
	}
	return orNone(out)
}
