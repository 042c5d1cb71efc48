package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// summary is one FSM's figures for a configuration: medians over rounds.
type summary struct {
	opsPerSec float64
	p50, p99  time.Duration
}

func summarize(runs []loadResult) summary {
	var ops []float64
	var p50, p99 []time.Duration
	for _, r := range runs {
		ops = append(ops, r.opsPerSec())
		p50 = append(p50, r.percentile(0.50))
		p99 = append(p99, r.percentile(0.99))
	}
	return summary{opsPerSec: median(ops), p50: median(p50), p99: median(p99)}
}

// ratios returns berth/baseline throughput for each round. Each pair ran
// back to back, so the ratio within a round is what drift distorts least.
func (c *cellRuns) ratios() []float64 {
	var out []float64
	for i := range min(len(c.baseline), len(c.berth)) {
		if b := c.baseline[i].opsPerSec(); b > 0 {
			out = append(out, c.berth[i].opsPerSec()/b)
		}
	}
	return out
}

func (rep *raftReport) print(quick bool) {
	var b strings.Builder
	b.WriteString("| servers | proposers | fsm | ops/s | p50 | p99 | berth/baseline ops/s |\n")
	b.WriteString("|--:|--:|---|--:|--:|--:|---|\n")
	var verdicts []string
	topProcs := raftProposerCounts[len(raftProposerCounts)-1]
	for _, servers := range raftServerCounts {
		for _, procs := range raftProposerCounts {
			runs := rep.cells[raftCell{servers, procs}]
			if runs == nil {
				continue
			}
			base, berth := summarize(runs.baseline), summarize(runs.berth)
			fmt.Fprintf(&b, "| %d | %d | baseline | %.0f | %s | %s | |\n", servers, procs, base.opsPerSec, fmtLatency(base.p50), fmtLatency(base.p99))
			rs := runs.ratios()
			ratio := median(rs)
			cellText := fmt.Sprintf("%.2f", ratio)
			if len(rs) > 1 {
				lo, hi := rs[0], rs[0]
				for _, r := range rs {
					lo, hi = min(lo, r), max(hi, r)
				}
				cellText += fmt.Sprintf(" (%.2f–%.2f)", lo, hi)
			}
			fmt.Fprintf(&b, "| %d | %d | berth | %.0f | %s | %s | %s |\n", servers, procs, berth.opsPerSec, fmtLatency(berth.p50), fmtLatency(berth.p99), cellText)
			if procs == topProcs {
				verdict := "met"
				if ratio < raftTargetRatio {
					verdict = "NOT met"
				}
				verdicts = append(verdicts, fmt.Sprintf("%d server(s) %.2f %s", servers, ratio, verdict))
			}
		}
	}
	fmt.Print(b.String())

	plan := rep.plan
	fmt.Println()
	fmt.Printf("Measured: raft.Apply → applied, each proposer waiting for its command before the next; "+
		"every cell is the median of %d run(s) of %s after %s of warmup, baseline and berth alternating per round "+
		"(ABBA), each run on a fresh cluster; the ratio is the median of the per-round berth/baseline ratios (min–max). "+
		"Command: NodeRegister of a full node (30 fingerprint attributes, 10 drivers × 8 attributes), "+
		"%d bytes per entry, the same bytes for both FSMs; every proposal registers a node ID not seen before, "+
		"so berth's node table grows to %d nodes per cluster. "+
		"Raft as the server runs it: raft-boltdb/v2 behind LogCache(%d), file snapshots, TCP on 127.0.0.1, "+
		"raft.DefaultConfig(); the servers of a cluster share this process and its %d CPUs.\n",
		plan.rounds, plan.window, plan.warmup, rep.entryBytes, rep.largestTable, logCacheSize, runtime.NumCPU())
	fmt.Println()

	fsmOnly := rep.fsmOnly.perOp
	fmt.Printf("FSM alone: %s per NodeRegister (Apply of %d distinct full nodes into an empty table, median of %d).",
		fmtLatency(fsmOnly), rep.fsmOnly.ops, plan.fsmOnlyReps)
	for _, servers := range raftServerCounts {
		runs := rep.cells[raftCell{servers, topProcs}]
		if runs == nil {
			continue
		}
		rate := summarize(runs.baseline).opsPerSec
		if rate <= 0 {
			continue
		}
		perCmd := time.Duration(float64(time.Second) / rate)
		// Every server applies every command, and here they share the CPUs.
		cpu := float64(servers) * fsmOnly.Seconds() * rate
		fmt.Printf(" Raft alone at %d proposers on %d server(s): %s per command; at that rate berth's FSM on all %d server(s) needs %.0f%% of one CPU.",
			topProcs, servers, fmtLatency(perCmd), servers, cpu*100)
	}
	fmt.Println()
	fmt.Println()
	fmt.Printf("Target berth/baseline ≥ %.2f at %d proposers: %s.\n", raftTargetRatio, topProcs, strings.Join(verdicts, "; "))
	if quick {
		fmt.Println("(-quick: a smoke run; these figures are too short to compare.)")
	}
}

// fmtLatency prints d with three significant figures in a unit that suits it.
func fmtLatency(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
	}
}
