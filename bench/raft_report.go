package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// summary is one FSM's figures for a configuration: medians over rounds.
type summary struct {
	opsPerSec float64
	p50, p99  time.Duration
	cpuPerOp  time.Duration
	cpuOK     bool
}

func summarize(runs []loadResult) summary {
	var ops []float64
	var p50, p99, cpu []time.Duration
	cpuOK := len(runs) > 0
	for _, r := range runs {
		ops = append(ops, r.opsPerSec())
		p50 = append(p50, r.percentile(0.50))
		p99 = append(p99, r.percentile(0.99))
		c, ok := r.cpuPerOp()
		cpu = append(cpu, c)
		cpuOK = cpuOK && ok
	}
	return summary{opsPerSec: median(ops), p50: median(p50), p99: median(p99), cpuPerOp: median(cpu), cpuOK: cpuOK}
}

func (s summary) cpuText() string {
	if !s.cpuOK {
		return "–"
	}
	return fmtLatency(s.cpuPerOp)
}

// ratios returns berth/baseline throughput for each round. Each pair ran
// back to back, so the ratio within a round is what drift distorts least.
func (c *cellRuns) ratios() []float64 { return c.ratiosOf(c.berth) }

// ratiosOf returns arm/baseline throughput for each round.
func (c *cellRuns) ratiosOf(arm []loadResult) []float64 {
	var out []float64
	for i := range min(len(c.baseline), len(arm)) {
		if b := c.baseline[i].opsPerSec(); b > 0 {
			out = append(out, arm[i].opsPerSec()/b)
		}
	}
	return out
}

func ratioText(rs []float64) string {
	if len(rs) == 0 {
		return "–"
	}
	text := fmt.Sprintf("%.2f", median(rs))
	if len(rs) > 1 {
		text += fmt.Sprintf(" (%.2f–%.2f)", slices.Min(rs), slices.Max(rs))
	}
	return text
}

// cpuRatiosOf returns baseline/arm CPU per command for each round: the
// throughput ratio a CPU-bound cluster would show, which other load on the
// machine barely moves.
func (c *cellRuns) cpuRatiosOf(arm []loadResult) []float64 {
	var out []float64
	for i := range min(len(c.baseline), len(arm)) {
		base, ok1 := c.baseline[i].cpuPerOp()
		other, ok2 := arm[i].cpuPerOp()
		if ok1 && ok2 && other > 0 {
			out = append(out, float64(base)/float64(other))
		}
	}
	return out
}

func (rep *raftReport) print(quick bool) {
	for i, pr := range rep.payloads {
		if i > 0 {
			fmt.Println()
		}
		pr.print(rep.plan)
	}

	plan := rep.plan
	fmt.Printf("\nMeasured: raft.Apply until applied, each proposer waiting for its command before proposing the next; "+
		"every FSM's proposers wait the same way (on the raft future, then a check of the FSM's answer), so the difference is the FSM. "+
		"Each cell is the median of %d run(s) of %s (after %s of warmup); the FSMs alternate per round (ABBA), "+
		"each on a fresh cluster; ratios are medians of the per-round ratios (min–max). "+
		"CPU/op is the whole process's CPU time (all servers, proposers, GC) per applied command; "+
		"baseline CPU/op ÷ this CPU/op is the throughput ratio a CPU-bound cluster would show, and other load on the machine barely moves it. "+
		"Each payload's entries are the same bytes for every FSM, and every proposal registers a node ID not seen before. "+
		"The memdb floor is an FSM that only inserts each entry's bytes as a row of a go-memdb table in one transaction per raft batch "+
		"(no checking, no lookup, no decoding): the least an FSM storing its state in go-memdb does, so the part of berth's cost that is the store. "+
		"Raft as the server runs it: raft-boltdb/v2 behind LogCache(%d), file snapshots, TCP on 127.0.0.1, "+
		"raft.DefaultConfig(); a cluster's servers share this process and the machine's %d CPUs.\n",
		plan.rounds, plan.window, plan.warmup, logCacheSize, runtime.NumCPU())

	if quick {
		fmt.Println("\n(-quick: a smoke run, too short to compare; no summary.)")
		return
	}
	fmt.Println()
	fmt.Println(rep.summary())
}

// summary quotes berth/baseline at the highest proposer count for every
// payload, with the go-memdb floor beside the headline. It judges nothing:
// NodeRegister is not a hot command (heartbeats are not raft writes), so the
// table is information; the command the project holds to a target is the
// plan that places allocations and reserves their claims.
func (rep *raftReport) summary() string {
	topProcs := raftProposerCounts[len(raftProposerCounts)-1]
	if len(rep.payloads) == 0 {
		return "Summary: nothing measured."
	}
	head := rep.payloads[0]
	var quotedHead []string
	for _, servers := range raftServerCounts {
		if r, ok := head.topRatio(servers); ok {
			quotedHead = append(quotedHead, fmt.Sprintf("%s %.2f", countText(servers, "server"), r))
		}
	}
	text := fmt.Sprintf("Summary (information, no target): berth/baseline ops/s at %d proposers on the %s payload: %s.",
		topProcs, head.spec.name, strings.Join(quotedHead, "; "))
	var floors []string
	for _, servers := range raftServerCounts {
		if r, ok := head.topFloorRatio(servers); ok {
			floors = append(floors, fmt.Sprintf("%s %.2f", countText(servers, "server"), r))
		}
	}
	if len(floors) > 0 {
		text += fmt.Sprintf(" The go-memdb floor (one insert per command and nothing else) reaches, in the same rounds: %s.", strings.Join(floors, "; "))
	}
	for _, pr := range rep.payloads[1:] {
		var quoted []string
		for _, servers := range raftServerCounts {
			if r, ok := pr.topRatio(servers); ok {
				quoted = append(quoted, fmt.Sprintf("%s %.2f", countText(servers, "server"), r))
			}
		}
		text += fmt.Sprintf(" %s payload (%d bytes per entry): %s.", capitalize(pr.spec.name), pr.entryBytes, strings.Join(quoted, "; "))
	}
	return text
}

// topRatio is the median berth/baseline throughput ratio at the highest
// proposer count on the given number of servers, if it was measured.
func (pr *payloadReport) topRatio(servers int) (float64, bool) {
	runs := pr.cells[raftCell{servers, raftProposerCounts[len(raftProposerCounts)-1]}]
	if runs == nil {
		return 0, false
	}
	rs := runs.ratios()
	if len(rs) == 0 {
		return 0, false
	}
	return median(rs), true
}

// topFloorRatio is the median floor/baseline throughput ratio at the
// highest proposer count, if the floor was measured.
func (pr *payloadReport) topFloorRatio(servers int) (float64, bool) {
	runs := pr.cells[raftCell{servers, raftProposerCounts[len(raftProposerCounts)-1]}]
	if runs == nil {
		return 0, false
	}
	rs := runs.ratiosOf(runs.floor)
	if len(rs) == 0 {
		return 0, false
	}
	return median(rs), true
}

// print writes one payload's heading, note, table and FSM-alone figures.
func (pr *payloadReport) print(plan raftPlan) {
	topProcs := raftProposerCounts[len(raftProposerCounts)-1]
	fmt.Printf("### %s payload\n\n", pr.spec.name)
	fmt.Printf("NodeRegister of %s: %d bytes per entry; berth's node table grows to %d nodes per cluster at most.\n\n",
		pr.spec.about, pr.entryBytes, pr.largestTable)

	var b strings.Builder
	b.WriteString("| servers | proposers | fsm | ops/s | p50 | p99 | CPU/op | ops/s ÷ baseline | baseline CPU/op ÷ this |\n")
	b.WriteString("|--:|--:|---|--:|--:|--:|--:|---|---|\n")
	for _, servers := range raftServerCounts {
		for _, procs := range raftProposerCounts {
			runs := pr.cells[raftCell{servers, procs}]
			if runs == nil {
				continue
			}
			base := summarize(runs.baseline)
			fmt.Fprintf(&b, "| %d | %d | baseline | %.0f | %s | %s | %s | | |\n",
				servers, procs, base.opsPerSec, fmtLatency(base.p50), fmtLatency(base.p99), base.cpuText())
			for _, arm := range []struct {
				name string
				runs []loadResult
			}{{floorKind.name, runs.floor}, {berthKind.name, runs.berth}} {
				if len(arm.runs) == 0 {
					continue
				}
				sum := summarize(arm.runs)
				fmt.Fprintf(&b, "| %d | %d | %s | %.0f | %s | %s | %s | %s | %s |\n",
					servers, procs, arm.name, sum.opsPerSec, fmtLatency(sum.p50), fmtLatency(sum.p99), sum.cpuText(),
					ratioText(runs.ratiosOf(arm.runs)), ratioText(runs.cpuRatiosOf(arm.runs)))
			}
		}
	}
	fmt.Print(b.String())

	fsmOnly := pr.fsmOnly
	fmt.Printf("\nFSM alone: Apply of one NodeRegister costs %s wall", fmtLatency(fsmOnly.wall))
	if fsmOnly.cpuOK {
		fmt.Printf(", %s CPU", fmtLatency(fsmOnly.cpu))
	}
	fmt.Printf(" (%d distinct nodes into an empty table in batches of %d, as raft hands them over under load; median of %d).\n",
		fsmOnly.ops, fsmOnlyBatch, plan.fsmOnlyReps)
	for _, servers := range raftServerCounts {
		runs := pr.cells[raftCell{servers, topProcs}]
		if runs == nil || !fsmOnly.cpuOK {
			continue
		}
		base, berth := summarize(runs.baseline), summarize(runs.berth)
		if !base.cpuOK || base.cpuPerOp <= 0 || berth.cpuPerOp <= 0 {
			continue
		}
		// Every server applies every command, on the same CPUs here.
		predicted := time.Duration(servers) * fsmOnly.cpu
		fmt.Printf("- %s, %d proposers: raft alone costs %s CPU per command; berth adds %s in the cluster "+
			"(%d × Apply alone = %s), %.0f%% on top of raft, so where the CPUs are the limit berth/baseline tops out near %.2f.\n",
			countText(servers, "server"), topProcs, fmtLatency(base.cpuPerOp), fmtLatency(berth.cpuPerOp-base.cpuPerOp),
			servers, fmtLatency(predicted), 100*float64(berth.cpuPerOp-base.cpuPerOp)/float64(base.cpuPerOp),
			float64(base.cpuPerOp)/float64(berth.cpuPerOp))
	}
}

// capitalize upper-cases an ASCII name's first letter.
func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// countText is "1 server", "3 servers".
func countText(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// fmtLatency prints d with three significant figures in a unit that suits it.
func fmtLatency(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	case d <= -time.Millisecond:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
	}
}
