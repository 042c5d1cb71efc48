package cli

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/builtin/drivers"
	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

func jobCommand() *cli.Command {
	detach := &cli.BoolFlag{Name: "detach", Usage: "print the evaluation ID and return instead of following it"}
	return &cli.Command{
		Name:  "job",
		Usage: "run, inspect and stop jobs",
		Subcommands: []*cli.Command{
			{
				Name:      "run",
				Usage:     "register a job and follow its evaluation and allocations until they run (exit 3 when placement or an allocation fails)",
				ArgsUsage: "FILE",
				Flags: []cli.Flag{addressFlag(), detach,
					&cli.Uint64Flag{Name: "check-index", Usage: "register only if the job's modify index is `N` (0: only if the job does not exist), as job plan printed it"}},
				Action: jobRun,
			},
			{
				Name:      "status",
				Usage:     "list jobs, or show one job (by ID or unique prefix): its groups, evaluations and allocations",
				ArgsUsage: "[JOB]",
				Flags:     readFlags(),
				Action:    jobStatus,
			},
			{
				Name:      "stop",
				Usage:     "stop a job's allocations (the job and its history are kept unless -purge)",
				ArgsUsage: "JOB",
				Flags:     []cli.Flag{addressFlag(), detach, &cli.BoolFlag{Name: "purge", Usage: "also remove the job and its history"}},
				Action:    jobStop,
			},
			{
				Name:      "plan",
				Usage:     "show what running a job file would change (exit 0: no allocation created or destroyed, 1: some would be, 255: error, 2: usage error)",
				ArgsUsage: "FILE",
				Flags:     []cli.Flag{addressFlag(), jsonFlag},
				Action:    jobPlan,
			},
			{
				Name:      "validate",
				Usage:     "check a job file without submitting it (task configs against the built-in drivers and those the agent's nodes report)",
				ArgsUsage: "FILE",
				Flags:     []cli.Flag{addressFlag()},
				Action:    jobValidate,
			},
			{
				Name:      "history",
				Usage:     "list a job's versions, newest first",
				ArgsUsage: "JOB",
				Flags:     readFlags(),
				Action:    jobHistory,
			},
			{
				Name:      "revert",
				Usage:     "register an earlier version of a job again, as its newest version, and follow it like job run",
				ArgsUsage: "JOB VERSION",
				Flags:     []cli.Flag{addressFlag(), detach},
				Action:    jobRevert,
			},
			{
				Name:      "inspect",
				Usage:     "print a job as the API's JSON",
				ArgsUsage: "JOB",
				Flags:     []cli.Flag{addressFlag()},
				Action:    jobInspect,
			},
		},
	}
}

// findJob resolves a job ID or unique prefix (findID).
func findJob(c *cli.Context, client *api.Client, prefix string) (string, error) {
	return findID(c.Context, "job", prefix, client.Jobs().List, (*pb.JobListStub).GetId)
}

func jobRun(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "job run takes exactly one job file")
	}
	job, err := readJobFile(c.Args().First(), c.App.Reader)
	if err != nil {
		return err
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	var opts *api.RegisterOptions
	if c.IsSet("check-index") {
		opts = &api.RegisterOptions{EnforceIndex: true, ModifyIndex: c.Uint64("check-index")}
	}
	// The servers' refusals name the job already.
	resp, err := client.Jobs().Register(c.Context, job, opts)
	if err != nil {
		return err
	}
	return followWrite(c, client, resp.GetEvalId(), resp.GetMeta().GetIndex(), resp.GetWarnings(), true)
}

// followWrite prints a write's warnings and follows its evaluation, or
// with -detach prints only the evaluation ID (the warnings go to stderr,
// so stdout stays the ID alone).
func followWrite(c *cli.Context, client *api.Client, evalID string, index uint64, warnings []string, allocs bool) error {
	w := c.App.Writer
	if c.Bool("detach") {
		w = c.App.ErrWriter
	}
	if len(warnings) > 0 {
		fmt.Fprintln(w, "Job Warnings:")
		for _, warn := range warnings {
			fmt.Fprintf(w, "* %s\n", warn)
		}
		fmt.Fprintln(w)
	}
	if c.Bool("detach") {
		if evalID == "" {
			return nil
		}
		_, err := fmt.Fprintln(c.App.Writer, evalID)
		return err
	}
	if evalID == "" {
		// Nothing to schedule (a stop of a job without allocs).
		return nil
	}
	return newMonitor(c, client).run(evalID, index, allocs)
}

func jobStop(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "job stop takes exactly one job ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	id, err := findJob(c, client, c.Args().First())
	if err != nil {
		return err
	}
	resp, err := client.Jobs().Deregister(c.Context, id, c.Bool("purge"))
	if err != nil {
		return fmt.Errorf("stopping job %s: %w", id, err)
	}
	if resp.GetEvalId() == "" && !c.Bool("detach") {
		_, err := fmt.Fprintf(c.App.Writer, "Job %q stopped; it had nothing to evaluate\n", id)
		return err
	}
	return followWrite(c, client, resp.GetEvalId(), resp.GetMeta().GetIndex(), nil, false)
}

func jobRevert(c *cli.Context) error {
	if c.NArg() != 2 {
		return usageError(c, "job revert takes a job ID and a version")
	}
	version, err := strconv.ParseUint(c.Args().Get(1), 10, 64)
	if err != nil {
		return usageError(c, "version %q is not a version number", c.Args().Get(1))
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	id, err := findJob(c, client, c.Args().First())
	if err != nil {
		return err
	}
	resp, err := client.Jobs().Revert(c.Context, id, version, nil)
	if err != nil {
		return fmt.Errorf("reverting job %s to version %d: %w", id, version, err)
	}
	return followWrite(c, client, resp.GetEvalId(), resp.GetMeta().GetIndex(), resp.GetWarnings(), true)
}

func jobInspect(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "job inspect takes exactly one job ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	id, err := findJob(c, client, c.Args().First())
	if err != nil {
		return err
	}
	job, _, err := client.Jobs().Info(c.Context, id, nil)
	if err != nil {
		return err
	}
	return printJSON(c.App.Writer, job)
}

func jobValidate(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "job validate takes exactly one job file")
	}
	name, src, err := readJobSource(c.Args().First(), c.App.Reader)
	if err != nil {
		return err
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	// The built-in drivers are known without an agent; the nodes' reports
	// add third-party drivers and win over a built-in's schema (a node
	// may run another build).
	schemas := builtinSchemas()
	builtins := strings.Join(slices.Sorted(maps.Keys(schemas)), ", ")
	nodeSchemas, err := driverSchemas(c, client)
	switch {
	case errors.As(err, new(*api.Error)):
		return fmt.Errorf("reading the nodes' drivers: %w", err)
	case err != nil:
		fmt.Fprintf(c.App.ErrWriter, "Only the built-in drivers (%s) checked: no agent answered at %s (%v)\n",
			builtins, client.Address(), err)
	case len(nodeSchemas) == 0:
		fmt.Fprintf(c.App.ErrWriter, "Only the built-in drivers (%s) checked: no node reports a driver's task config schema\n", builtins)
	}
	partial := err != nil || len(nodeSchemas) == 0
	maps.Copy(schemas, nodeSchemas)
	if partial {
		// Without the nodes' reports a driver that is not built in may
		// still exist on them: it is left unchecked (a nil schema), not
		// refused.
		job, err := parseJob(name, src)
		if err != nil {
			return err
		}
		for _, d := range jobDrivers(job) {
			if _, ok := schemas[d]; !ok {
				schemas[d] = nil
				fmt.Fprintf(c.App.ErrWriter, "Driver %q not checked: it is not built in\n", d)
			}
		}
	}
	job, err := parseJob(name, src, jobspec.WithDrivers(schemas), jobspec.WithLimits(serverLimits(c, client)))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "Job %q is valid\n", job.GetId())
	return err
}

// serverLimits returns the job limits of the server the agent runs, or the
// defaults, saying so, when it runs none or does not answer (the servers
// check their own limits again at register).
func serverLimits(c *cli.Context, client *api.Client) jobspec.Limits {
	self, err := client.AgentSelf(c.Context)
	switch {
	case err != nil:
		fmt.Fprintf(c.App.ErrWriter, "Job limits checked are the defaults: the agent at %s did not say its own (%v)\n", client.Address(), err)
	case self.GetServer().GetJobLimits() == nil:
		fmt.Fprintf(c.App.ErrWriter, "Job limits checked are the defaults: the agent at %s runs no server\n", client.Address())
	}
	return jobspec.LimitsOf(self.GetServer().GetJobLimits())
}

// jobDrivers is the drivers job's tasks name, sorted, each once.
func jobDrivers(job *pb.Job) []string {
	seen := map[string]bool{}
	for _, g := range job.GetGroups() {
		for _, t := range g.GetTasks() {
			seen[t.GetDriver()] = true
		}
	}
	delete(seen, "")
	return slices.Sorted(maps.Keys(seen))
}

// builtinSchemas is the task config schema of each driver built into berth
// for production, by name. The dev-only mock is known only when a node
// reports it: a production cluster does not run it.
func builtinSchemas() map[string]*driverpb.Schema {
	out := map[string]*driverpb.Schema{}
	for _, b := range drivers.All() {
		if !b.DevOnly {
			out[b.Name] = b.TaskSchema
		}
	}
	return out
}

// driverSchemas gathers the task config schemas of the drivers the nodes
// report, by driver name, preferring a healthy driver's: what the servers
// check a job's tasks against when it is registered.
func driverSchemas(c *cli.Context, client *api.Client) (map[string]*driverpb.Schema, error) {
	nodes, _, err := api.AllPages(c.Context, &api.QueryOptions{PerPage: listPerPage}, client.Nodes)
	if err != nil {
		return nil, err
	}
	schemas := map[string]*driverpb.Schema{}
	healthy := map[string]bool{}
	for _, n := range nodes {
		for name, d := range n.GetDrivers() {
			if d.GetTaskSchema() == nil || healthy[name] {
				continue
			}
			schemas[name], healthy[name] = d.GetTaskSchema(), d.GetHealthy()
		}
	}
	return schemas, nil
}
