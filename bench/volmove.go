package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/volumehooks"
)

// The volmove section (issue 26, item 2): a single-node-writer CSI volume
// moved with its job from one client to the other, on three servers and
// two clients (volmove_cluster.go: real processes, the hostpath plugin's
// controller and node as tasks). The consumer is a raw_exec `/bin/sleep`
// constrained to one client; a round moves it to the other, alternately
// by a job update (the scheduler stops the old alloc and places the new
// one once the claim is freed) and by a stop followed at once by a run.
// Every point is measured from the old alloc's stop, the plan that
// stopped it (its modified_at, or when the call that stopped it was
// issued if the client had updated it already), and is a time the cluster records
// where the step happens (one machine, one clock), except those a
// blocking query observes:
//
//	old alloc told to stop  old alloc's task event "Killing" (its node saw the stop)
//	old task gone       old alloc's task event "Terminated"
//	unpublished         old alloc's task event "Volume unpublished"
//	unstaged            old alloc's task event "Volume unstaged"
//	node-detached       the claim's modified_at while node-detached
//	                    (observed: a blocking query may miss it)
//	claim freed         the old claim gone (observed)
//	new claim reserved  the new claim's created_at (the plan's applied_at)
//	new alloc on its node  new alloc's task event "Received" (its node has
//	                    it and recorded it; concurrent with "attached")
//	attached            the new attachment's modified_at while attached
//	staged, published   new alloc's task events "Volume staged/published"
//	task set up         new alloc's task event "Task Setup" (prerun hooks
//	                    done, the task's prestart begins)
//	task started        new alloc's task event "Started"
//	running             the new alloc running (observed)
//
// With BERTH_OLD_BIN=<old berth> a second cluster of that binary runs
// beside the first and the rounds alternate between them (before/after
// in one run). Target: stop of the old alloc → new alloc running with the
// volume ≤ 100 ms (median).

const (
	volMoveTarget = 100 * time.Millisecond
	volMoveJobID  = "bench-mover"
)

var volMoveSteps = []string{"old alloc told to stop", "old task gone", "unpublished", "unstaged", "node-detached", "claim freed",
	"new claim reserved", "new alloc on its node", "attached", "staged", "published", "task set up", "task started", "running"}

// volMoveOnFollower is the new alloc seen running by a blocking query on
// a follower: what a client served by one sees, a follower learning the
// leader's commit only from the replication stream (DefaultRaftCommitTimeout
// in host/server). It is printed under the steps, not one of them.
const volMoveOnFollower = "running, seen on a follower"

// volMoveKinds are the two ways a round moves the job.
var volMoveKinds = []string{"update", "stop, run"}

type volMoveReport struct {
	label string // the binary's role: "new" or "old"
	bin   string
	kind  string
	runs  []csiFlowRun
}

func benchVolMove(opts options) error {
	plan := jobRunPlan{warmup: 2, runs: 20}
	if opts.quick {
		plan = jobRunPlan{warmup: 1, runs: 2}
	}
	bin, err := berthBinary()
	if err != nil {
		return err
	}
	if err := csiFlowNeedRoot(); err != nil {
		return err
	}
	bins := []volMoveBin{{"new", bin}}
	if old := os.Getenv("BERTH_OLD_BIN"); old != "" {
		bins = append(bins, volMoveBin{"old", old})
	}
	reps, err := measureVolMove(bins, plan)
	if err != nil {
		return err
	}
	return printVolMove(os.Stdout, reps, plan, opts.quick)
}

type volMoveBin struct{ label, path string }

// measureVolMove starts a cluster per binary and measures plan's rounds:
// each round moves the job once on every cluster in turn, the kind
// alternating round by round; one report per binary and kind.
func measureVolMove(bins []volMoveBin, plan jobRunPlan) ([]*volMoveReport, error) {
	var clusters []*volMoveCluster
	defer func() {
		for _, c := range clusters {
			c.stop(false)
		}
	}()
	for _, b := range bins {
		c, err := startVolMoveCluster(b.path)
		if err != nil {
			return nil, fmt.Errorf("%s cluster (%s): %w", b.label, b.path, err)
		}
		clusters = append(clusters, c)
	}
	reps := map[string]*volMoveReport{}
	var out []*volMoveReport
	for _, b := range bins {
		for _, k := range volMoveKinds {
			r := &volMoveReport{label: b.label, bin: b.path, kind: k}
			reps[b.label+"/"+k] = r
			out = append(out, r)
		}
	}
	// Each cluster's consumer starts on its first client.
	at := make([]int, len(clusters))
	for i, c := range clusters {
		if _, err := startVolMover(c, 0); err != nil {
			return nil, fmt.Errorf("%s cluster: first run: %w", bins[i].label, err)
		}
	}
	for round := range 2*plan.warmup + 2*plan.runs {
		kind := volMoveKinds[round%len(volMoveKinds)]
		// Which cluster moves first turns every other round, so each
		// kind sees both orders: the cluster moving second competes with
		// the tail of the first one's move (its reports, its executor
		// started ahead, its followers applying).
		for j := range clusters {
			i := (j + round/len(volMoveKinds)) % len(clusters)
			c := clusters[i]
			to := 1 - at[i]
			r, err := oneVolMove(c, kind, to)
			if err != nil {
				return nil, fmt.Errorf("%s cluster, round %d (%s to %s): %w (logs under %s)", bins[i].label, round, kind, c.clients[to].name, err, c.dir)
			}
			at[i] = to
			if round >= 2*plan.warmup {
				rep := reps[bins[i].label+"/"+kind]
				rep.runs = append(rep.runs, r)
			}
		}
	}
	return out, nil
}

// volMoverJob is the consumer, constrained to the named client.
func volMoverJob(node string) (*pb.Job, error) {
	return jobspec.Parse(volMoveJobID+".hcl", fmt.Appendf(nil, `
job %q {
  type = "service"
  constraint {
    attribute = "${node.unique.name}"
    value     = %q
  }
  group "app" {
    count = 1
    volume "data" {
      type            = "csi"
      source          = %q
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "app" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
      volume_mount {
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
`, volMoveJobID, node, volMoveVolumeID))
}

// startVolMover runs the consumer on client to and waits until it runs.
func startVolMover(c *volMoveCluster, to int) (*pb.Allocation, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job, err := volMoverJob(c.clients[to].name)
	if err != nil {
		return nil, err
	}
	reg, err := c.api.Jobs().Register(ctx, job, nil)
	if err != nil {
		return nil, err
	}
	a, _, err := waitAllocRunning(ctx, c.api, volMoveJobID, reg.GetMeta().GetIndex())
	return a, err
}

// oneVolMove moves the running consumer to client to, the kind's way, and
// returns the round's points.
func oneVolMove(c *volMoveCluster, kind string, to int) (csiFlowRun, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader, follower, err := c.leaderAPI(ctx)
	if err != nil {
		return nil, err
	}
	allocs, meta, err := leader.Jobs().Allocations(ctx, volMoveJobID, nil)
	if err != nil {
		return nil, err
	}
	var old *pb.Allocation
	for _, a := range allocs {
		if a.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING && a.GetDesiredStatus() == pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN {
			old = a
		}
	}
	if old == nil {
		return nil, fmt.Errorf("no running alloc of %s to move: %v", volMoveJobID, allocs)
	}
	view, _, err := leader.Volumes().Info(ctx, volMoveVolumeID, nil)
	if err != nil {
		return nil, err
	}
	oldClaim, _ := claimOf(view, old.GetId())
	if oldClaim == nil {
		return nil, fmt.Errorf("the running alloc %s holds no claim on %s: %v", old.GetId(), volMoveVolumeID, view.GetClaims())
	}
	job, err := volMoverJob(c.clients[to].name)
	if err != nil {
		return nil, err
	}

	vols := make(chan volMoveSeen, 1)
	go func() { vols <- followVolMove(ctx, leader, oldClaim.GetId(), c.nodeIDs[to], meta.LastIndex) }()
	type seen struct {
		at  time.Time
		err error
	}
	onFollower := make(chan seen, 1)
	go func() {
		_, _, at, err := followMoverAllocs(ctx, follower, old.GetId(), meta.LastIndex, time.Time{})
		onFollower <- seen{at, err}
	}()
	issued := time.Now()
	if kind == "stop, run" {
		if _, err := leader.Jobs().Deregister(ctx, volMoveJobID, false); err != nil {
			return nil, err
		}
	}
	if _, err := leader.Jobs().Register(ctx, job, nil); err != nil {
		return nil, err
	}
	stopped, alloc, running, err := followMoverAllocs(ctx, leader, old.GetId(), meta.LastIndex, issued)
	if err != nil {
		return nil, err
	}
	if alloc.GetNodeId() != c.nodeIDs[to] {
		return nil, fmt.Errorf("the new alloc %s runs on node %s, want %s", alloc.GetId(), alloc.GetNodeId(), c.nodeIDs[to])
	}
	vs := <-vols
	if vs.err != nil {
		return nil, vs.err
	}
	if vs.newClaim.GetAllocId() != alloc.GetId() {
		return nil, fmt.Errorf("the volume's new claim %v is not the new alloc %s's", vs.newClaim, alloc.GetId())
	}
	fs := <-onFollower
	if fs.err != nil {
		return nil, fmt.Errorf("following the allocs on a follower: %w", fs.err)
	}
	out := csiFlowRun{"running": running.Sub(stopped), "claim freed": vs.freed.Sub(stopped),
		"new claim reserved": time.Unix(0, vs.newClaim.GetCreatedAt()).Sub(stopped), "attached": vs.attached.Sub(stopped),
		volMoveOnFollower: fs.at.Sub(stopped)}
	if !vs.detached.IsZero() {
		out["node-detached"] = vs.detached.Sub(stopped)
	}
	events := alloc.GetTaskStates()["app"].GetEvents()
	for step, typ := range map[string]string{"staged": volumehooks.EventVolumeStaged, "published": volumehooks.EventVolumePublished, "task started": "Started",
		"new alloc on its node": "Received", "task set up": "Task Setup"} {
		at, err := eventTime(alloc.GetId(), events, typ)
		if err != nil {
			return nil, err
		}
		out[step] = at.Sub(stopped)
	}
	// The old alloc's teardown events reach the servers with its status.
	events, err = waitTaskEvent(ctx, leader, old.GetId(), "app", volumehooks.EventVolumeUnstaged)
	if err != nil {
		return nil, err
	}
	for step, typ := range map[string]string{"old alloc told to stop": "Killing", "old task gone": "Terminated", "unpublished": volumehooks.EventVolumeUnpublished, "unstaged": volumehooks.EventVolumeUnstaged} {
		at, err := eventTime(old.GetId(), events, typ)
		if err != nil {
			return nil, err
		}
		out[step] = at.Sub(stopped)
	}
	return out, nil
}

// followMoverAllocs follows the job's allocs with blocking queries from
// index until an alloc other than old runs; it returns when old was
// stopped (the stopping plan's applied_at when the answer that first
// showed it stopped had no client update since, else when it was seen),
// the new alloc, and when it was seen running. When the client had
// updated it already, the plan's time is lost and seeing it is late (its
// task may be gone before): then the stop is when the call that caused it
// was issued, if given — early, never after the steps that follow.
func followMoverAllocs(ctx context.Context, c *api.Client, old string, index uint64, issued time.Time) (stopped time.Time, alloc *pb.Allocation, running time.Time, err error) {
	q := &api.QueryOptions{WaitIndex: index, WaitTime: 20 * time.Second}
	for {
		allocs, meta, err := c.Jobs().Allocations(ctx, volMoveJobID, q)
		if err != nil {
			return time.Time{}, nil, time.Time{}, err
		}
		now := time.Now()
		for _, a := range allocs {
			switch {
			case a.GetId() == old && stopped.IsZero() && a.GetDesiredStatus() != pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN:
				switch {
				case a.GetModifyIndex() == a.GetAllocModifyIndex():
					stopped = time.Unix(0, a.GetModifiedAt())
				case !issued.IsZero():
					stopped = issued
				default:
					stopped = now
				}
			case a.GetId() != old && a.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING:
				alloc, running = a, now
			case a.GetId() != old && a.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED:
				return time.Time{}, nil, time.Time{}, fmt.Errorf("alloc %s failed: %s", a.GetId(), a.GetClientDescription())
			}
		}
		if alloc != nil {
			if stopped.IsZero() {
				return time.Time{}, nil, time.Time{}, fmt.Errorf("alloc %s runs and alloc %s was never seen stopped", alloc.GetId(), old)
			}
			return stopped, alloc, running, nil
		}
		q.WaitIndex = meta.LastIndex
	}
}

type volMoveSeen struct {
	detached, freed, attached time.Time
	newClaim                  *pb.Claim
	err                       error
}

// followVolMove follows the volume with blocking queries from index until
// the old claim is gone and a new claim is in use with its attachment to
// node attached, checking at every answer that the volume never has two
// write claims.
func followVolMove(ctx context.Context, c *api.Client, oldClaim, node string, index uint64) (s volMoveSeen) {
	q := &api.QueryOptions{WaitIndex: index, WaitTime: 20 * time.Second}
	for {
		view, meta, err := c.Volumes().Info(ctx, volMoveVolumeID, q)
		if err != nil {
			s.err = err
			return s
		}
		now := time.Now()
		var old, fresh *pb.Claim
		writers := 0
		for _, cl := range view.GetClaims() {
			if cl.GetMode() == pb.ClaimMode_CLAIM_MODE_WRITE {
				writers++
			}
			if cl.GetId() == oldClaim {
				old = cl
			} else {
				fresh = cl
			}
		}
		if writers > 1 {
			s.err = fmt.Errorf("two write claims on %s at once: %v", volMoveVolumeID, view.GetClaims())
			return s
		}
		switch {
		case old != nil && old.GetState() == pb.ClaimState_CLAIM_STATE_NODE_DETACHED:
			s.detached = time.Unix(0, old.GetModifiedAt())
		case old == nil && s.freed.IsZero():
			s.freed = now
		}
		if fresh != nil {
			s.newClaim = fresh
			for _, a := range view.GetAttachments() {
				if a.GetNodeId() == node && a.GetState() == pb.AttachmentState_ATTACHMENT_STATE_ATTACHED && s.attached.IsZero() {
					s.attached = time.Unix(0, a.GetModifiedAt())
				}
			}
		}
		if old == nil && fresh != nil && fresh.GetState() == pb.ClaimState_CLAIM_STATE_IN_USE && !s.attached.IsZero() {
			return s
		}
		q.WaitIndex = meta.LastIndex
	}
}

// printVolMove writes one table per binary and kind (each point's median
// and p99 since the old alloc's stop, the step before it as a median and
// as a share of the path's mean), then the verdicts and, with an old
// binary, the medians side by side.
func printVolMove(w io.Writer, reps []*volMoveReport, plan jobRunPlan, quick bool) error {
	var b strings.Builder
	medians := map[*volMoveReport]map[string]time.Duration{}
	for _, r := range reps {
		if len(r.runs) == 0 {
			return errors.New("volmove: no runs measured")
		}
		medians[r] = volMoveTable(&b, fmt.Sprintf("%s binary, move by %s: → (since the old alloc's stop)", r.label, r.kind), r.runs)
		b.WriteString("\n")
	}
	mode := ""
	if quick {
		mode = " (quick mode: too few runs to judge)"
	}
	fmt.Fprintf(&b, "%d rounds per kind after %d warm-up rounds%s on 3 servers and 2 clients (real processes, data dirs: raft and "+
		"the state DB fsynced), the hostpath plugin's controller and node as raw_exec tasks; the consumer, a raw_exec `/bin/sleep` "+
		"holding one single-node-writer volume, moves to the other client each round, by a job update and by a stop then a run "+
		"in turn%s. A step is the median of the time from the point above; its share is of the path's mean. Node-detached and "+
		"claim freed are observed by blocking queries on the leader (node-detached may be missed); the last row, by one on a follower.\n",
		len(reps[0].runs), plan.warmup, mode, map[bool]string{true: ", the clusters of both binaries round by round", false: ""}[len(reps) > 2])
	for _, r := range reps {
		if r.label != "new" {
			continue
		}
		m := medians[r]["running"]
		verdict := "MISSES"
		if m <= volMoveTarget {
			verdict = "meets"
		}
		fmt.Fprintf(&b, "move by %s: old alloc's stop → new alloc running with the volume: median %s: %s ≤ %s.\n",
			r.kind, fmtMS(m), verdict, fmtMS(volMoveTarget))
	}
	if len(reps) > 2 {
		b.WriteString("\n| move by | step | old (median) | new (median) | new ÷ old |\n|---|---|--:|--:|--:|\n")
		for _, k := range volMoveKinds {
			var nr, or *volMoveReport
			for _, r := range reps {
				if r.kind == k && r.label == "new" {
					nr = r
				} else if r.kind == k {
					or = r
				}
			}
			for _, s := range []string{"claim freed", "new claim reserved", "running", volMoveOnFollower} {
				o, n := medians[or][s], medians[nr][s]
				ratio := "–"
				if o > 0 {
					ratio = fmt.Sprintf("%.2f", float64(n)/float64(o))
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", k, s, fmtMS(o), fmtMS(n), ratio)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// volMoveTable writes one report's table and returns each point's median.
func volMoveTable(b *strings.Builder, title string, runs []csiFlowRun) map[string]time.Duration {
	medians := map[string]time.Duration{}
	fmt.Fprintf(b, "| %s | median | p99 | step (median) | share |\n|---|--:|--:|--:|--:|\n", title)
	end := volMoveSteps[len(volMoveSteps)-1]
	var total time.Duration
	for _, run := range runs {
		total += run[end]
	}
	for k, s := range volMoveSteps {
		var points, deltas []time.Duration
		var sum time.Duration
		for _, run := range runs {
			p, ok := run[s]
			if !ok {
				continue
			}
			points = append(points, p)
			d := p - run.before(volMoveSteps[:k])
			deltas = append(deltas, d)
			sum += d
		}
		name := s
		if len(points) < len(runs) {
			name = fmt.Sprintf("%s (%d of %d runs)", s, len(points), len(runs))
		}
		if len(points) == 0 {
			fmt.Fprintf(b, "| %s | – | – | – | – |\n", name)
			continue
		}
		slices.Sort(points)
		slices.Sort(deltas)
		medians[s] = points[len(points)/2]
		share := 0.0
		if total > 0 {
			share = 100 * float64(sum) / float64(total)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %.0f%% |\n", name, fmtMS(medians[s]), fmtMS(percentile(points, 0.99)),
			fmtMS(deltas[len(deltas)/2]), share)
	}
	// The follower's sighting, after the leader's: a step of its own.
	var points, lags []time.Duration
	for _, run := range runs {
		if p, ok := run[volMoveOnFollower]; ok {
			points = append(points, p)
			lags = append(lags, p-run[end])
		}
	}
	if len(points) > 0 {
		slices.Sort(points)
		slices.Sort(lags)
		medians[volMoveOnFollower] = points[len(points)/2]
		fmt.Fprintf(b, "| (%s) | %s | %s | %s after the leader | – |\n", volMoveOnFollower, fmtMS(points[len(points)/2]),
			fmtMS(percentile(points, 0.99)), fmtMS(lags[len(lags)/2]))
	}
	return medians
}
