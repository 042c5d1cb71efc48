package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// The containerd section: a container started three ways, interleaved in
// one run so that the machine's drift hits all alike:
//
//	ctr run      `ctr run -d` of the bench image: the process from exec to
//	             exit (it exits once the task is started)
//	containerd   `job run` → running of a berth job whose task runs the
//	             same image under the containerd driver plugin (from the
//	             register call to a blocking query seeing the alloc run)
//	exec         the same for a task of the exec driver (`/bin/sleep`)
//
// on a dev agent (a real `berth run -dev` process, built by make bench)
// with the containerd plugin built from examples/containerd, against a
// private containerd (or BERTH_CONTAINERD_ADDRESS's). For both berth
// tasks it also gives received → started: the driver's StartTask as the
// client's task events time it. Each run's task is stopped and gone
// before the next run starts.
//
// Target: berth's containerd job run → running ≤ 1.2× ctr run at the
// median.

const ctrdTarget = 1.2

type ctrdReport struct {
	plan jobRunPlan
	// per run, in run order
	ctr, ctrd, exec            []time.Duration
	ctrUp                      []time.Duration // `ctr version`: ctr's own start-up and one round trip
	ctrdStarting, execStarting []time.Duration // received → started
}

func benchContainerd(opts options) error {
	plan := jobRunPlan{warmup: 3, runs: 30}
	if opts.quick {
		plan = jobRunPlan{warmup: 1, runs: 3}
	}
	bin, err := berthBinary()
	if err != nil {
		return err
	}
	rep, err := measureContainerd(bin, plan)
	if err != nil {
		return err
	}
	return rep.print(os.Stdout, opts.quick)
}

// measureContainerd sets the section up and measures plan's runs.
func measureContainerd(bin string, plan jobRunPlan) (*ctrdReport, error) {
	env, err := setUpContainerd()
	if err != nil {
		return nil, err
	}
	defer env.close()
	agent, err := startCtrdAgent(bin, env)
	if err != nil {
		return nil, err
	}
	defer agent.stop()
	c, err := api.NewClient("http://" + agent.http)
	if err != nil {
		return nil, err
	}
	ctrdTask := &pb.Task{Name: "t", Driver: "containerd",
		Config:    map[string]*driverpb.ConfigValue{"image": {Kind: &driverpb.ConfigValue_StringValue{StringValue: ctrdBenchImage}}},
		Resources: &pb.TaskResources{CpuMhz: 20, MemoryMb: 32}}
	execTask := &pb.Task{Name: "t", Driver: "exec",
		Config: map[string]*driverpb.ConfigValue{
			"command": {Kind: &driverpb.ConfigValue_StringValue{StringValue: "/bin/sleep"}},
			"args":    {Kind: &driverpb.ConfigValue_ListValue{ListValue: &driverpb.StringList{Values: []string{"600"}}}},
		},
		Resources: &pb.TaskResources{CpuMhz: 20, MemoryMb: 32}}
	rep := &ctrdReport{plan: plan}
	for i := range plan.warmup + plan.runs {
		var ctrTook, ctrUp time.Duration
		var ctrd, ex taskRun
		// The order rotates run by run, so what one start leaves the
		// machine doing (a shim exiting, a snapshot removed) slows each
		// kind alike.
		kinds := []func() error{
			func() (err error) {
				if ctrUp, err = env.ctrVersion(); err != nil {
					return err
				}
				ctrTook, err = env.ctrRun(fmt.Sprintf("bench-ctr-%03d", i))
				return err
			},
			func() (err error) {
				ctrd, err = oneTaskRun(c, fmt.Sprintf("bench-ctrd-%03d", i), ctrdTask)
				return err
			},
			func() (err error) {
				ex, err = oneTaskRun(c, fmt.Sprintf("bench-exec-%03d", i), execTask)
				return err
			},
		}
		for k := range kinds {
			if err := kinds[(i+k)%len(kinds)](); err != nil {
				return nil, fmt.Errorf("run %d: %w (agent log: %s)", i, err, agent.logPath)
			}
		}
		if i < plan.warmup {
			continue
		}
		rep.ctr = append(rep.ctr, ctrTook)
		rep.ctrUp = append(rep.ctrUp, ctrUp)
		rep.ctrd = append(rep.ctrd, ctrd.running)
		rep.exec = append(rep.exec, ex.running)
		rep.ctrdStarting = append(rep.ctrdStarting, ctrd.started-ctrd.received)
		rep.execStarting = append(rep.execStarting, ex.started-ex.received)
	}
	return rep, nil
}

// ctrVersion times `ctr version`: what of ctr run is ctr's own start-up
// and one round trip to containerd.
func (e *ctrdEnv) ctrVersion() (time.Duration, error) {
	start := time.Now()
	if out, err := exec.Command("ctr", "--address", e.addr, "version").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ctr version: %w\n%s", err, out)
	}
	return time.Since(start), nil
}

// ctrRun times `ctr run -d` of the bench image as container id, then
// removes it (untimed).
func (e *ctrdEnv) ctrRun(id string) (time.Duration, error) {
	args := []string{"--address", e.addr, "--namespace", ctrdNamespace, "run", "-d", ctrdBenchImage, id}
	cmd := exec.Command("ctr", args...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("ctr run: %w\n%s", err, out)
	}
	if out, err := e.ctr("tasks", "rm", "-f", id); err != nil {
		return 0, fmt.Errorf("ctr tasks rm -f %s: %w\n%s", id, err, out)
	}
	if out, err := e.ctr("containers", "rm", id); err != nil {
		return 0, fmt.Errorf("ctr containers rm %s: %w\n%s", id, err, out)
	}
	return took, nil
}

// taskRun is one job's points, since its register call.
type taskRun struct{ received, started, running time.Duration }

// oneTaskRun registers a job of task, waits for its alloc to run, reads
// the client's task events, then purges the job and waits for the alloc
// to have stopped.
func oneTaskRun(c *api.Client, id string, task *pb.Task) (taskRun, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job := &pb.Job{Id: id, Name: id, Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "g", Count: 1, Tasks: []*pb.Task{task}}}}
	start := time.Now()
	reg, err := c.Jobs().Register(ctx, job, nil)
	if err != nil {
		return taskRun{}, err
	}
	var running time.Time
	var alloc *pb.Allocation
	q := &api.QueryOptions{WaitIndex: reg.GetMeta().GetIndex(), WaitTime: 20 * time.Second}
	for alloc == nil {
		allocs, meta, err := c.Jobs().Allocations(ctx, id, q)
		if err != nil {
			return taskRun{}, err
		}
		for _, a := range allocs {
			switch a.GetClientStatus() {
			case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING:
				running, alloc = time.Now(), a
			case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED:
				return taskRun{}, fmt.Errorf("alloc %s failed: %s %v", a.GetId(), a.GetClientDescription(), a.GetTaskStates()[task.GetName()].GetEvents())
			}
		}
		q.WaitIndex = meta.LastIndex
	}
	at := func(typ string) (time.Duration, error) {
		for _, e := range alloc.GetTaskStates()[task.GetName()].GetEvents() {
			if e.GetType() == typ {
				return time.Unix(0, e.GetOccurredAt()).Sub(start), nil
			}
		}
		return 0, fmt.Errorf("alloc %s has no %q event", alloc.GetId(), typ)
	}
	r := taskRun{running: running.Sub(start)}
	if r.received, err = at("Received"); err != nil {
		return taskRun{}, err
	}
	if r.started, err = at("Started"); err != nil {
		return taskRun{}, err
	}
	dereg, err := c.Jobs().Deregister(ctx, id, true)
	if err != nil {
		return taskRun{}, err
	}
	q = &api.QueryOptions{WaitIndex: dereg.GetMeta().GetIndex(), WaitTime: 20 * time.Second}
	for {
		a, meta, err := c.Allocations().Info(ctx, alloc.GetId(), q)
		if err != nil {
			return taskRun{}, fmt.Errorf("waiting for alloc %s to stop: %w", alloc.GetId(), err)
		}
		if s := a.GetClientStatus(); s != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING && s != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING {
			return r, nil
		}
		q.WaitIndex = meta.LastIndex
	}
}

// startCtrdAgent runs `berth run -dev` with the section's plugin dir, the
// containerd driver pointed at env's containerd and exec enabled, and
// waits for both drivers to be healthy.
func startCtrdAgent(bin string, env *ctrdEnv) (*devAgent, error) {
	dir, err := os.MkdirTemp("", "berth-bench-dev-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `ports {
  http = %d
  rpc  = %d
  raft = %d
}
plugin_dir = %q
plugin "containerd" {
  config {
    address = %q
  }
}
plugin "exec" {
  config {
    enabled = true
  }
}
`, ports[0], ports[1], ports[2], env.pluginDir, env.addr), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "run", "-dev", "-config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &devAgent{cmd: cmd, http: fmt.Sprintf("127.0.0.1:%d", ports[0]), dir: dir, logPath: logPath}
	c, err := api.NewClient("http://" + a.http)
	if err != nil {
		a.stop()
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		nodes, _, err := c.Nodes(ctx, nil)
		cancel()
		if err == nil && len(nodes) == 1 && nodes[0].GetStatus() == pb.NodeStatus_NODE_STATUS_READY &&
			nodes[0].GetDrivers()["containerd"].GetHealthy() && nodes[0].GetDrivers()["exec"].GetHealthy() {
			return a, nil
		}
		if time.Now().After(deadline) {
			a.stop()
			var drivers map[string]*pb.DriverInfo
			if len(nodes) == 1 {
				drivers = nodes[0].GetDrivers()
			}
			return nil, errors.Join(fmt.Errorf("the dev agent's node did not become ready with healthy containerd and exec drivers in 60s (drivers %v); log: %s", drivers, logPath), err)
		}
		time.Sleep(50 * time.Millisecond) // start-up only, not a measured path
	}
}

func (r *ctrdReport) print(w io.Writer, quick bool) error {
	sorted := func(ds []time.Duration) []time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s
	}
	ctr, ctrd, ex := sorted(r.ctr), sorted(r.ctrd), sorted(r.exec)
	if len(ctr) == 0 {
		return errors.New("containerd: no runs measured")
	}
	med := func(s []time.Duration) time.Duration { return s[len(s)/2] }
	ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.2f×", float64(a)/float64(b)) }
	fmt.Fprintf(w, "| start | median | p90 | median / ctr run | p90 / ctr run |\n|---|--:|--:|--:|--:|\n")
	fmt.Fprintf(w, "| ctr run -d | %s | %s | 1.00× | 1.00× |\n", fmtMS(med(ctr)), fmtMS(percentile(ctr, 0.9)))
	for _, row := range []struct {
		name string
		s    []time.Duration
	}{{"berth containerd: job run → running", ctrd}, {"berth exec: job run → running", ex}} {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", row.name, fmtMS(med(row.s)), fmtMS(percentile(row.s, 0.9)),
			ratio(med(row.s), med(ctr)), ratio(percentile(row.s, 0.9), percentile(ctr, 0.9)))
	}
	cs, es, up := sorted(r.ctrdStarting), sorted(r.execStarting), sorted(r.ctrUp)
	fmt.Fprintf(w, "| ctr version (ctr's own start-up, one round trip) | %s | %s | | |\n", fmtMS(med(up)), fmtMS(percentile(up, 0.9)))
	fmt.Fprintf(w, "| berth containerd: received → started (StartTask) | %s | %s | | |\n", fmtMS(med(cs)), fmtMS(percentile(cs, 0.9)))
	fmt.Fprintf(w, "| berth exec: received → started (StartTask) | %s | %s | | |\n", fmtMS(med(es)), fmtMS(percentile(es, 0.9)))
	got := float64(med(ctrd)) / float64(med(ctr))
	verdict := "meets"
	if got > ctrdTarget {
		verdict = "MISSES"
	}
	note := ""
	if quick {
		note = " (quick mode: too few runs to judge)"
	}
	_, err := fmt.Fprintf(w, "\n%d runs after %d warm-up runs, interleaved (ctr run, containerd job, exec job, the order rotated run by run), one container at a time; "+
		"the containerd task runs the bench image's /ctrsleep, the exec task /bin/sleep. "+
		"berth containerd / ctr run at the median %.2f×: %s the target of ≤ %.1f×%s.\n",
		r.plan.runs, r.plan.warmup, got, verdict, ctrdTarget, note)
	return err
}

// freePorts returns n free loopback TCP ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	return ports, nil
}
