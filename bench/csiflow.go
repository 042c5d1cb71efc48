package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/host/volumespec"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/volumehooks"
)

// The csiflow section: a job with a CSI volume, from `job run` to its task
// running with the volume published, and from `job stop` to the volume's
// claim freed, on a dev agent (a real `berth run -dev` process, built by
// make bench) running the built-in hostpath plugin as a raw_exec monolith
// task of a system job. The consumer is a raw_exec `/bin/sleep`, which
// exits on its first signal. Each run is a new job claiming the same
// single-node-writer volume; the next starts once the last one's claim is
// freed. Every point is a time the cluster records where the step happens
// (one machine, one clock), except the two a blocking query observes:
//
//	claim reserved   the plan that placed the alloc reserved the claim (the
//	                 claim's created_at: the plan's applied_at)
//	attached         the leader applied ControllerPublishVolume's answer
//	                 (the attachment's modified_at while attached)
//	staged           task event "Volume staged" (NodeStageVolume returned)
//	published        task event "Volume published" (NodePublishVolume)
//	task started     task event "Started" (the driver started the task)
//	running          the client's report of it running, applied: seen by a
//	                 blocking query on the job's allocs
//
//	kill sent        task event "Killing" (the client saw the alloc stopped
//	                 and signals the task)
//	task exited      task event "Terminated" (the driver saw it exit)
//	unpublished      task event "Volume unpublished"
//	unstaged         task event "Volume unstaged"
//	node-detached    the servers applied the client's node-detached report
//	                 (the claim's modified_at while node-detached, seen by a
//	                 blocking query on the volume)
//	claim freed      the leader applied ControllerUnpublishVolume's answer,
//	                 which removes the attachment and frees the claim in one
//	                 raft apply: seen by a blocking query on the volume
//
// Targets (medians): submit → running ≤ 150 ms, stop → claim freed ≤ 30
// ms, with no step waiting on anything but its own work.

const (
	csiFlowSubmitTarget = 150 * time.Millisecond
	csiFlowStopTarget   = 30 * time.Millisecond
	csiFlowPluginID     = "bench-hostpath"
	csiFlowVolumeID     = "bench-vol"
)

var (
	csiFlowSubmitSteps = []string{"claim reserved", "attached", "staged", "published", "task started", "running"}
	csiFlowStopSteps   = []string{"kill sent", "task exited", "host mount gone", "unpublished", "unstaged", "node-detached", "claim freed"}
)

// csiFlowRun is one run's points, each the time since its path began (the
// register call, the stop call).
type csiFlowRun map[string]time.Duration

// before is the run's latest point among steps (in path order) that it
// has, 0 (the path's start) when it has none: a step missed in this run
// (node-detached is observed, and may be) is measured across, not from
// another run's point.
func (r csiFlowRun) before(steps []string) time.Duration {
	for i := len(steps) - 1; i >= 0; i-- {
		if p, ok := r[steps[i]]; ok {
			return p
		}
	}
	return 0
}

type csiFlowReport struct {
	plan jobRunPlan
	// consumer is the consumer's driver: csiFlowRawExec or csiFlowExec.
	consumer string
	runs     []csiFlowRun
	// durable: the agent was given a data dir, so raft and the client
	// state DB fsync as in production; a plain dev agent keeps raft in
	// memory (as Nomad's does) and is what the targets judge.
	durable bool
}

func benchCSIFlow(opts options) error {
	plan := jobRunPlan{warmup: 3, runs: 20}
	if opts.quick {
		plan = jobRunPlan{warmup: 1, runs: 3}
	}
	bin, err := berthBinary()
	if err != nil {
		return err
	}
	if err := csiFlowNeedRoot(); err != nil {
		return err
	}
	if old := os.Getenv("BERTH_OLD_BIN"); old != "" {
		return benchCSIFlowVs(old, bin, plan)
	}
	reps, err := measureCSIFlow(bin, plan, false, csiFlowRawExec, csiFlowExec)
	if err != nil {
		return err
	}
	for _, rep := range reps {
		if err := rep.print(os.Stdout, opts.quick); err != nil {
			return err
		}
		fmt.Println()
	}
	if opts.quick {
		return nil
	}
	// The same flow on a durable agent, for information: what the fsyncs
	// of raft and the state DB add.
	reps, err = measureCSIFlow(bin, plan, true, csiFlowExec)
	if err != nil {
		return err
	}
	return reps[0].print(os.Stdout, opts.quick)
}

// measureCSIFlow starts a dev agent with the plugin and the volume and
// measures plan's runs of each consumer, interleaved (one run of each in
// turn), one report per consumer.
func measureCSIFlow(bin string, plan jobRunPlan, durable bool, consumers ...string) ([]*csiFlowReport, error) {
	agent, err := startDevAgentWith(bin, durable, csiFlowAgentHCL)
	if err != nil {
		return nil, err
	}
	defer agent.stop()
	c, err := api.NewClient("http://" + agent.http)
	if err != nil {
		return nil, err
	}
	if err := setUpCSIFlow(c, bin, agent.dir); err != nil {
		return nil, fmt.Errorf("%w (agent log: %s)", err, agent.logPath)
	}
	var reps []*csiFlowReport
	for _, consumer := range consumers {
		reps = append(reps, &csiFlowReport{plan: plan, consumer: consumer, durable: durable})
	}
	for i := range plan.warmup + plan.runs {
		for k, rep := range reps {
			r, err := oneCSIFlowRun(c, fmt.Sprintf("bench-csi-%03d-%d", i, k), rep.consumer)
			if err != nil {
				return nil, fmt.Errorf("run %d (%s): %w (agent log: %s)", i, rep.consumer, err, agent.logPath)
			}
			if i >= plan.warmup {
				rep.runs = append(rep.runs, r)
			}
		}
	}
	return reps, nil
}

// setUpCSIFlow runs the plugin's system job, waits for the plugin to be
// schedulable and creates the volume.
func setUpCSIFlow(c *api.Client, bin, dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	state := filepath.Join(dir, "hostpath-state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	job, err := jobspec.Parse("bench-hostpath.hcl", fmt.Appendf(nil, `
job "bench-hostpath" {
  type = "system"
  group "plugin" {
    task "plugin" {
      driver = "raw_exec"
      config {
        command = %q
        args    = ["builtin", "csi-hostpath", "--endpoint", "${CSI_ENDPOINT}", "--node-id", "${node.unique.name}",
                   "--mode", "monolith", "--state-dir", %q]
      }
      csi_plugin {
        id   = %q
        type = "monolith"
      }
      resources {
        cpu    = 50
        memory = 64
      }
    }
  }
}
`, bin, state, csiFlowPluginID))
	if err != nil {
		return err
	}
	_, meta, err := c.CSIPlugins().List(ctx, &api.QueryOptions{Params: map[string]string{"prefix": csiFlowPluginID}})
	if err != nil {
		return err
	}
	if _, err := c.Jobs().Register(ctx, job, nil); err != nil {
		return fmt.Errorf("registering the plugin job: %w", err)
	}
	q := &api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 20 * time.Second, Params: map[string]string{"prefix": csiFlowPluginID}}
	for schedulable := false; !schedulable; {
		plugins, meta, err := c.CSIPlugins().List(ctx, q)
		if err != nil {
			return fmt.Errorf("waiting for plugin %s: %w", csiFlowPluginID, err)
		}
		for _, p := range plugins {
			schedulable = schedulable || (p.GetId() == csiFlowPluginID && p.GetSchedulable())
		}
		q.WaitIndex = meta.LastIndex
	}
	return createBenchVolume(ctx, c, csiFlowVolumeID, csiFlowPluginID)
}

// createBenchVolume creates the benches' 1 MiB single-node-writer
// file-system volume id of plugin.
func createBenchVolume(ctx context.Context, c *api.Client, id, plugin string) error {
	vol, err := volumespec.Parse("bench-vol.hcl", fmt.Appendf(nil, `
id           = %q
plugin_id    = %q
capacity_min = "1MiB"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`, id, plugin), volumespec.ForCreate)
	if err != nil {
		return err
	}
	if _, err := c.Volumes().Create(ctx, vol); err != nil {
		return fmt.Errorf("creating volume %s: %w", id, err)
	}
	return nil
}

// csiFlowJob is the consumer: one alloc claiming the volume, a task that
// exits on its first signal (raw_exec) or from its TERM trap (exec).
func csiFlowJob(id, consumer string) (*pb.Job, error) {
	return jobspec.Parse(id+".hcl", fmt.Appendf(nil, `
job %q {
  type = "service"
  group "app" {
    count = 1
    volume "data" {
      type            = "csi"
      source          = %q
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "app" {
%s      volume_mount {
        volume      = "data"
        destination = "/data"
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
`, id, csiFlowVolumeID, csiFlowTaskHCL(consumer)))
}

// oneCSIFlowRun runs the consumer job until its task runs, stops it until
// its claim is freed, reads the points and purges the job.
func oneCSIFlowRun(c *api.Client, id, consumer string) (csiFlowRun, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job, err := csiFlowJob(id, consumer)
	if err != nil {
		return nil, err
	}
	out := csiFlowRun{}

	start := time.Now()
	reg, err := c.Jobs().Register(ctx, job, nil)
	if err != nil {
		return nil, err
	}
	alloc, running, err := waitAllocRunning(ctx, c, id, reg.GetMeta().GetIndex())
	if err != nil {
		return nil, err
	}
	out["running"] = running.Sub(start)
	view, _, err := c.Volumes().Info(ctx, csiFlowVolumeID, nil)
	if err != nil {
		return nil, err
	}
	claim, att := claimOf(view, alloc.GetId())
	if claim == nil || att == nil || att.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHED {
		return nil, fmt.Errorf("alloc %s runs, but volume %s holds claim %v and attachment %v, want its claim and an attached attachment",
			alloc.GetId(), csiFlowVolumeID, claim, att)
	}
	out["claim reserved"] = time.Unix(0, claim.GetCreatedAt()).Sub(start)
	out["attached"] = time.Unix(0, att.GetModifiedAt()).Sub(start)
	events := alloc.GetTaskStates()["app"].GetEvents()
	for step, typ := range map[string]string{"staged": volumehooks.EventVolumeStaged, "published": volumehooks.EventVolumePublished, "task started": "Started"} {
		at, err := eventTime(alloc.GetId(), events, typ)
		if err != nil {
			return nil, err
		}
		out[step] = at.Sub(start)
	}

	// The stop: the volume is followed with blocking queries from the
	// index the stop was applied at, the host's mount table with poll(2).
	mount, err := watchMountGone("/csi/", alloc.GetId())
	if err != nil {
		return nil, err
	}
	stop := time.Now()
	dereg, err := c.Jobs().Deregister(ctx, id, false)
	if err != nil {
		return nil, err
	}
	detached, freed, err := waitClaimFreed(ctx, c, claim.GetId(), dereg.GetMeta().GetIndex())
	if err != nil {
		return nil, err
	}
	out["claim freed"] = freed.Sub(stop)
	gone, err := mount.wait()
	if err != nil {
		return nil, err
	}
	out["host mount gone"] = gone.Sub(stop)
	if !detached.IsZero() {
		out["node-detached"] = detached.Sub(stop)
	}
	// The client reports the teardown's events with the alloc's status;
	// they may reach the servers after the claim is freed.
	events, err = waitTaskEvent(ctx, c, alloc.GetId(), "app", volumehooks.EventVolumeUnstaged)
	if err != nil {
		return nil, err
	}
	for step, typ := range map[string]string{"kill sent": "Killing", "task exited": "Terminated", "unpublished": volumehooks.EventVolumeUnpublished,
		"unstaged": volumehooks.EventVolumeUnstaged} {
		at, err := eventTime(alloc.GetId(), events, typ)
		if err != nil {
			return nil, err
		}
		out[step] = at.Sub(stop)
	}
	if _, err := c.Jobs().Deregister(ctx, id, true); err != nil {
		return nil, err
	}
	return out, nil
}

// waitAllocRunning follows job id's allocs with blocking queries from
// index until one runs, and returns it with the time it was seen running.
func waitAllocRunning(ctx context.Context, c *api.Client, id string, index uint64) (*pb.Allocation, time.Time, error) {
	q := &api.QueryOptions{WaitIndex: index, WaitTime: 20 * time.Second}
	for {
		allocs, meta, err := c.Jobs().Allocations(ctx, id, q)
		if err != nil {
			return nil, time.Time{}, err
		}
		for _, a := range allocs {
			switch a.GetClientStatus() {
			case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING:
				return a, time.Now(), nil
			case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED:
				return nil, time.Time{}, fmt.Errorf("alloc %s failed: %s (events %v)", a.GetId(), a.GetClientDescription(), a.GetTaskStates())
			}
		}
		q.WaitIndex = meta.LastIndex
	}
}

// waitClaimFreed follows the volume with blocking queries from index
// until claim id is gone, and returns when the claim was applied
// node-detached (its modified_at; zero if no answer showed it so) and
// when it was seen gone.
func waitClaimFreed(ctx context.Context, c *api.Client, id string, index uint64) (detached, freed time.Time, err error) {
	q := &api.QueryOptions{WaitIndex: index, WaitTime: 20 * time.Second}
	for {
		view, meta, err := c.Volumes().Info(ctx, csiFlowVolumeID, q)
		if err != nil {
			return time.Time{}, time.Time{}, err
		}
		seen := time.Now()
		var claim *pb.Claim
		for _, cl := range view.GetClaims() {
			if cl.GetId() == id {
				claim = cl
			}
		}
		switch {
		case claim == nil:
			return detached, seen, nil
		case claim.GetState() == pb.ClaimState_CLAIM_STATE_NODE_DETACHED:
			detached = time.Unix(0, claim.GetModifiedAt())
		}
		q.WaitIndex = meta.LastIndex
	}
}

// waitTaskEvent follows the alloc with blocking queries until its task
// has an event of type typ, and returns the task's events.
func waitTaskEvent(ctx context.Context, c *api.Client, allocID, task, typ string) ([]*pb.TaskEvent, error) {
	q := &api.QueryOptions{WaitTime: 20 * time.Second}
	for {
		a, meta, err := c.Allocations().Info(ctx, allocID, q)
		if err != nil {
			return nil, err
		}
		events := a.GetTaskStates()[task].GetEvents()
		if slices.ContainsFunc(events, func(e *pb.TaskEvent) bool { return e.GetType() == typ }) {
			return events, nil
		}
		q.WaitIndex = meta.LastIndex
	}
}

// claimOf returns the volume's claim of alloc and its attachment to the
// claim's node.
func claimOf(view *pb.VolumeView, allocID string) (*pb.Claim, *pb.Attachment) {
	for _, cl := range view.GetClaims() {
		if cl.GetAllocId() != allocID {
			continue
		}
		for _, a := range view.GetAttachments() {
			if a.GetNodeId() == cl.GetNodeId() {
				return cl, a
			}
		}
		return cl, nil
	}
	return nil, nil
}

func eventTime(allocID string, events []*pb.TaskEvent, typ string) (time.Time, error) {
	for _, e := range events {
		if e.GetType() == typ {
			return time.Unix(0, e.GetOccurredAt()), nil
		}
	}
	return time.Time{}, fmt.Errorf("alloc %s has no %q event", allocID, typ)
}

// print writes the two tables (each point's median and p99 since its
// path began, the step before it as a median and as a share of the path's
// mean) and the verdicts.
func (r *csiFlowReport) print(w io.Writer, quick bool) error {
	if len(r.runs) == 0 {
		return errors.New("csiflow: no runs measured")
	}
	var b strings.Builder
	medians := map[string]time.Duration{}
	table := func(title string, steps []string) {
		fmt.Fprintf(&b, "| %s | median | p99 | step (median) | share |\n|---|--:|--:|--:|--:|\n", title)
		end := steps[len(steps)-1]
		var total time.Duration
		for _, run := range r.runs {
			total += run[end]
		}
		for k, s := range steps {
			var points, deltas []time.Duration
			var sum time.Duration
			for _, run := range r.runs {
				p, ok := run[s]
				if !ok {
					continue
				}
				points = append(points, p)
				d := p - run.before(steps[:k]) // each run from its own latest earlier point
				deltas = append(deltas, d)
				sum += d
			}
			name := s
			if len(points) < len(r.runs) {
				name = fmt.Sprintf("%s (%d of %d runs)", s, len(points), len(r.runs))
			}
			if len(points) == 0 {
				fmt.Fprintf(&b, "| %s | – | – | – | – |\n", name)
				continue
			}
			slices.Sort(points)
			slices.Sort(deltas)
			medians[s] = points[len(points)/2]
			share := 0.0
			if total > 0 {
				// Over all runs: a step missed in a run counts 0 there,
				// and the next step carries its time, so shares add up.
				share = 100 * float64(sum) / float64(total)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %.0f%% |\n", name, fmtMS(medians[s]), fmtMS(percentile(points, 0.99)),
				fmtMS(deltas[len(deltas)/2]), share)
		}
	}
	table("job run → (since the register call)", csiFlowSubmitSteps)
	b.WriteString("\n")
	table("job stop → (since the stop call)", csiFlowStopSteps)
	verdict := func(d, target time.Duration) string {
		if d <= target {
			return "meets"
		}
		return "MISSES"
	}
	submit, stop := medians["running"], medians["claim freed"]
	mode := ""
	if quick {
		mode = " (quick mode: too few runs to judge)"
	}
	agent := "a dev agent (raft in memory, state DB unsynced: its data dir is temporary, as a Nomad dev agent's)"
	if r.durable {
		agent = "a dev agent given a data dir (raft on disk and the state DB fsynced, as in production)"
	}
	consumer := "raw_exec `/bin/sleep`"
	if r.consumer == csiFlowExec {
		consumer = "exec `/bin/sh` trapping TERM"
	}
	fmt.Fprintf(&b, "\n%d runs after %d warm-up runs%s, one consumer job (%s, one single-node-writer CSI volume) at a time, "+
		"interleaved with the other consumers, on %s running the hostpath plugin as a raw_exec monolith task of a system job. "+
		"A step is the median of the time from the point above; its share is of the path's mean. Host mount gone: the "+
		"publish target left the host's mount table (poll on mountinfo). Controller-unpublished and claim freed are one raft apply.\n",
		len(r.runs), r.plan.warmup, mode, consumer, agent)
	targets := csiFlowTargets[r.consumer]
	if r.durable {
		fmt.Fprintf(&b, "Submit → running: median %s; stop → claim freed: median %s (information: the targets are for a dev agent).\n",
			fmtMS(submit), fmtMS(stop))
	} else {
		fmt.Fprintf(&b, "%s: submit → running with the volume published: median %s: %s ≤ %s (Nomad 1.11.3 here, exec consumer: 544 ms median).\n",
			r.consumer, fmtMS(submit), verdict(submit, targets[0]), fmtMS(targets[0]))
		fmt.Fprintf(&b, "%s: stop → claim freed: median %s: %s ≤ %s (Nomad 1.11.3 here, exec consumer: 101.9 ms median).\n",
			r.consumer, fmtMS(stop), verdict(stop, targets[1]), fmtMS(targets[1]))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
