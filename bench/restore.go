package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"berth.dev/berth/host/server"
	"berth.dev/berth/rpc/api"
)

// The restore section measures `berth operator snapshot restore` of issue
// 25's largest state (restore_state.go: 10,000 nodes, the 10,000-alloc job
// running, 1,000 claimed volumes), built through the FSM, into three real
// servers (`berth run`, data dirs of their own: raft's log and snapshots
// on disk, as in production) on loopback. A restore runs from the first
// byte uploaded to the leader until its answer: the leader checks the
// upload, raft restores it and commits a no-op, which needs a follower to
// have installed the snapshot, and the leader's duties restart on it.
// The leader's log line "snapshot restored" gives the parts (upload,
// check, raft, after). Target: ≤ 2 s.
//
// With BERTH_OLD_BIN=<old berth> a cluster of that binary runs beside,
// and the rounds restore into each in turn (old, new, old, new...), so
// both see the same machine.

const restoreTarget = 2 * time.Second

type restorePlan struct {
	state     restoreState
	warmup, n int
}

var (
	fullRestorePlan  = restorePlan{state: issue25State, warmup: 1, n: 20}
	quickRestorePlan = restorePlan{state: restoreState{nodes: 500, allocs: 500, claims: 50}, warmup: 1, n: 2}
)

type restoreRun struct {
	total                       time.Duration
	upload, check, raft, after_ time.Duration
}

type restoreReport struct {
	label, bin string
	runs       []restoreRun
}

func benchRestore(opts options) error {
	plan := fullRestorePlan
	if opts.quick {
		plan = quickRestorePlan
	}
	bin, err := berthBinary()
	if err != nil {
		return err
	}
	bins := []volMoveBin{{"new", bin}}
	if old := os.Getenv("BERTH_OLD_BIN"); old != "" {
		bins = append([]volMoveBin{{"old", old}}, bins...)
	}
	fmt.Fprintf(os.Stderr, "restore: building the state through the FSM (%d nodes, %d allocs, %d claims)\n",
		plan.state.nodes, plan.state.allocs, plan.state.claims)
	built, err := plan.state.build()
	if err != nil {
		return fmt.Errorf("building the state: %w", err)
	}
	archive, err := restoreArchive(built)
	if err != nil {
		return err
	}
	reps, err := measureRestore(bins, archive, plan)
	if err != nil {
		return err
	}
	return printRestore(os.Stdout, reps, plan, len(archive), opts.quick)
}

// restoreArchive is built's snapshot as `berth operator snapshot save`
// writes it.
func restoreArchive(built *builtState) ([]byte, error) {
	var archive bytes.Buffer
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, ID: "bench-restore", Index: built.index, Term: 1,
		Size: int64(len(built.snapshot))}
	if err := server.WriteSnapshotArchive(&archive, meta, bytes.NewReader(built.snapshot)); err != nil {
		return nil, fmt.Errorf("writing the snapshot archive: %w", err)
	}
	return archive.Bytes(), nil
}

// measureRestore starts a cluster per binary and restores archive into
// each in turn, plan.warmup rounds not counted, then plan.n.
func measureRestore(bins []volMoveBin, archive []byte, plan restorePlan) ([]*restoreReport, error) {
	var clusters []*volMoveCluster
	defer func() {
		for _, c := range clusters {
			for _, s := range c.servers {
				s.stop()
			}
			_ = os.RemoveAll(c.dir)
		}
	}()
	var reps []*restoreReport
	for _, b := range bins {
		c, err := startRestoreCluster(b.path)
		if c != nil {
			clusters = append(clusters, c)
		}
		if err != nil {
			return nil, fmt.Errorf("%s cluster (%s): %w", b.label, b.path, err)
		}
		reps = append(reps, &restoreReport{label: b.label, bin: b.path})
	}
	for round := range plan.warmup + plan.n {
		for i, c := range clusters {
			r, err := restoreOnce(c, archive)
			if err != nil {
				return nil, fmt.Errorf("%s cluster, round %d: %w (logs under %s)", reps[i].label, round+1, err, c.dir)
			}
			fmt.Fprintf(os.Stderr, "restore: %s round %d: %s (upload %s, check %s, raft %s, after %s)\n", reps[i].label, round+1,
				r.total.Round(time.Millisecond), r.upload, r.check, r.raft, r.after_)
			if round >= plan.warmup {
				reps[i].runs = append(reps[i].runs, r)
			}
		}
	}
	return reps, nil
}

// startRestoreCluster starts three servers of bin, no clients: the
// restored nodes never heartbeat, so the grace is an hour, as a cluster
// whose clients heartbeat would not mark them down.
func startRestoreCluster(bin string) (*volMoveCluster, error) {
	dir, err := os.MkdirTemp("", "brs-")
	if err != nil {
		return nil, err
	}
	c := &volMoveCluster{bin: bin, dir: dir}
	ports, err := freeLoopbackPorts(3 * 3)
	if err != nil {
		return c, err
	}
	if _, err := c.startServers(ports, "  heartbeat_grace  = \"1h\"\n"); err != nil {
		return c, err
	}
	if c.api, err = api.NewClient("http://" + c.servers[0].http); err != nil {
		return c, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		if _, _, err := c.leaderAPI(ctx); err == nil {
			return c, nil
		} else if ctx.Err() != nil {
			return c, fmt.Errorf("no leader: %w", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var restoredLine = regexp.MustCompile(`snapshot restored.* upload=(\S+) check=(\S+) raft=(\S+) after=(\S+)`)

// restoreOnce uploads archive to the leader and times it to the answer,
// with the parts the leader logged.
func restoreOnce(c *volMoveCluster, archive []byte) (restoreRun, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader, _, err := c.leaderAPI(ctx)
	if err != nil {
		return restoreRun{}, err
	}
	var logPath string
	addr, _ := c.api.Leader(ctx)
	for _, s := range c.servers {
		if s.rpc == addr {
			logPath = s.logPath
		}
	}
	start := time.Now()
	if _, err := leader.SnapshotRestore(ctx, bytes.NewReader(archive)); err != nil {
		return restoreRun{}, err
	}
	r := restoreRun{total: time.Since(start)}
	if f, err := os.Open(logPath); err == nil {
		b, _ := io.ReadAll(f)
		f.Close()
		if m := restoredLine.FindAllSubmatch(b, -1); len(m) > 0 {
			last := m[len(m)-1]
			for i, d := range []*time.Duration{&r.upload, &r.check, &r.raft, &r.after_} {
				*d, _ = time.ParseDuration(string(last[i+1]))
			}
		}
	}
	return r, nil
}

func printRestore(w io.Writer, reps []*restoreReport, plan restorePlan, archive int, quick bool) error {
	fmt.Fprintf(w, "\n## restore: operator snapshot restore into 3 servers (%d nodes, %d allocs, %d claims; archive %.1f MB)\n\n",
		plan.state.nodes, plan.state.allocs, plan.state.claims, float64(archive)/1e6)
	fmt.Fprintf(w, "%d restores per binary after %d not counted, binaries in turn. Target: p50 ≤ %s.\n\n", plan.n, plan.warmup, restoreTarget)
	fmt.Fprintln(w, "| binary | p50 | p90 | max | raft p50 | raft p90 | check p50 | upload p50 | after p50 |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range reps {
		pick := func(f func(restoreRun) time.Duration) []time.Duration {
			var d []time.Duration
			for _, run := range r.runs {
				d = append(d, f(run))
			}
			slices.Sort(d)
			return d
		}
		total := pick(func(x restoreRun) time.Duration { return x.total })
		rft := pick(func(x restoreRun) time.Duration { return x.raft })
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.label,
			fmtDur(quantile(total, 0.5)), fmtDur(quantile(total, 0.9)), fmtDur(quantile(total, 1)),
			fmtDur(quantile(rft, 0.5)), fmtDur(quantile(rft, 0.9)),
			fmtDur(quantile(pick(func(x restoreRun) time.Duration { return x.check }), 0.5)),
			fmtDur(quantile(pick(func(x restoreRun) time.Duration { return x.upload }), 0.5)),
			fmtDur(quantile(pick(func(x restoreRun) time.Duration { return x.after_ }), 0.5)))
	}
	if !quick {
		for _, r := range reps {
			if r.label == "new" && len(r.runs) > 0 {
				var total []time.Duration
				for _, run := range r.runs {
					total = append(total, run.total)
				}
				slices.Sort(total)
				if p50 := quantile(total, 0.5); p50 > restoreTarget {
					fmt.Fprintf(w, "\nnew: p50 %s is over the %s target.\n", fmtDur(p50), restoreTarget)
				}
			}
		}
	}
	return nil
}

// quantile is the q-quantile of sorted d (nearest rank), 0 if empty.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}
