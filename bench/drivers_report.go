package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// driverReport holds the rounds' results; index 0 is in-process, 1 plugin.
type driverReport struct {
	plan      driverPlan
	mockStart [2][][]time.Duration
	mockRate  [2][]float64
	rawStart  [2][][]time.Duration
	rawExit   [2][][]time.Duration
	launch    []time.Duration
	// isoStart is StartTask → running through go-plugin, raw_exec (0)
	// and exec (1); isolationSkipped says why it is empty.
	isoStart         [2][][]time.Duration
	isolationSkipped string
}

// execBudget is the target: exec may cost at most this much more
// than raw_exec to start a task.
const execBudget = 50 * time.Millisecond

func (rep *driverReport) print() {
	var b strings.Builder
	b.WriteString("| measurement | in-process | go-plugin | go-plugin ÷ in-process |\n")
	b.WriteString("|---|--:|--:|---|\n")
	latRow := func(label string, runs [2][][]time.Duration, q float64) {
		in, pl := drvMedianQ(runs[0], q), drvMedianQ(runs[1], q)
		var ratios []float64
		for i := range min(len(runs[0]), len(runs[1])) {
			if base := drvPercentile(runs[0][i], q); base > 0 {
				ratios = append(ratios, float64(drvPercentile(runs[1][i], q))/float64(base))
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", label, drvDur(in), drvDur(pl), drvRatioText(ratios))
	}
	latRow("mock StartTask → running, p50", rep.mockStart, 0.50)
	latRow("mock StartTask → running, p99", rep.mockStart, 0.99)
	var rateRatios []float64
	for i := range min(len(rep.mockRate[0]), len(rep.mockRate[1])) {
		if rep.mockRate[0][i] > 0 {
			rateRatios = append(rateRatios, rep.mockRate[1][i]/rep.mockRate[0][i])
		}
	}
	fmt.Fprintf(&b, "| mock StartTask throughput, %d callers | %.0f/s | %.0f/s | %s |\n",
		rep.plan.workers, drvMedian(rep.mockRate[0]), drvMedian(rep.mockRate[1]), drvRatioText(rateRatios))
	latRow("raw_exec StartTask /bin/true, p50", rep.rawStart, 0.50)
	latRow("raw_exec StartTask → exit reported, /bin/true, p50", rep.rawExit, 0.50)
	fmt.Fprintf(&b, "| plugin launch (start, handshake, negotiate), p50 | | %s | |\n", drvDur(drvPercentile(rep.launch, 0.50)))
	fmt.Fprintf(&b, "| plugin launch, p99 | | %s | |\n", drvDur(drvPercentile(rep.launch, 0.99)))
	fmt.Print(b.String())
	fmt.Printf("\nMeasured: the same driver code called directly (in-process) and through sdk.LaunchDriver's "+
		"go-plugin gRPC client to a subprocess of this binary (go-plugin). Each figure is the median over %d round(s); "+
		"in-process and go-plugin alternate per round (ABBA) and ratios are medians of per-round ratios (min–max). "+
		"Per round and side: %d sequential mock StartTask calls (a mock task is running when StartTask returns; each "+
		"is destroyed untimed), %d mock tasks started by %d concurrent callers, and %d raw_exec tasks running /bin/true "+
		"(StartTask includes spawning the task's executor, a re-execution of this binary). Plugin launch: %d launches "+
		"of the mock plugin until it answers Capabilities. %d CPUs.\n",
		rep.plan.rounds, rep.plan.starts, rep.plan.burst, rep.plan.workers, rep.plan.rawExecStarts, rep.plan.launches, runtime.NumCPU())
	rep.printIsolation()
}

// printIsolation prints what exec's isolation costs over raw_exec.
func (rep *driverReport) printIsolation() {
	fmt.Print("\n")
	if rep.isolationSkipped != "" {
		fmt.Printf("exec vs raw_exec: not measured (%s).\n", rep.isolationSkipped)
		return
	}
	var b strings.Builder
	b.WriteString("| StartTask → running, through go-plugin | raw_exec | exec | exec − raw_exec | exec ÷ raw_exec | within +" +
		execBudget.String() + " |\n")
	b.WriteString("|---|--:|--:|--:|---|---|\n")
	met := true
	for _, q := range []struct {
		label string
		q     float64
	}{{"p50", 0.50}, {"p99", 0.99}} {
		raw, iso := drvMedianQ(rep.isoStart[0], q.q), drvMedianQ(rep.isoStart[1], q.q)
		var ratios []float64
		for i := range min(len(rep.isoStart[0]), len(rep.isoStart[1])) {
			if base := drvPercentile(rep.isoStart[0][i], q.q); base > 0 {
				ratios = append(ratios, float64(drvPercentile(rep.isoStart[1][i], q.q))/float64(base))
			}
		}
		diff := iso - raw
		within := "yes"
		if diff > execBudget {
			within = "no"
			if q.q == 0.50 {
				met = false
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %+.2f ms | %s | %s |\n", q.label, drvDur(raw), drvDur(iso), float64(diff)/1e6, drvRatioText(ratios), within)
	}
	fmt.Print(b.String())
	verdict := "met"
	if !met {
		verdict = "NOT met"
	}
	fmt.Printf("\nMeasured: %d tasks per round and driver running /bin/sleep with memory and CPU resources, started "+
		"through go-plugin and destroyed untimed; raw_exec and exec alternate per round (ABBA). exec's StartTask "+
		"includes creating the task's cgroup (v1 or v2), the executor re-exec, the namespace init (a second re-exec "+
		"with new mount, PID, IPC and UTS namespaces), the read-only binds of chroot_env, /proc, /dev and pivot_root. "+
		"Target exec p50 ≤ raw_exec p50 + %s: %s (p99 is shown against the same budget; on a shared machine it mostly measures the neighbours).\n", rep.plan.isolationStarts, execBudget, verdict)
}

// drvPercentile returns the q quantile of sorted durations.
func drvPercentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[min(i, len(sorted)-1)]
}

// drvMedianQ is the median over rounds of each round's q quantile.
func drvMedianQ(rounds [][]time.Duration, q float64) time.Duration {
	var qs []float64
	for _, r := range rounds {
		qs = append(qs, float64(drvPercentile(r, q)))
	}
	return time.Duration(drvMedian(qs))
}

func drvMedian(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func drvRatioText(rs []float64) string {
	if len(rs) == 0 {
		return "–"
	}
	text := fmt.Sprintf("%.2f", drvMedian(rs))
	if len(rs) > 1 {
		text += fmt.Sprintf(" (%.2f–%.2f)", slices.Min(rs), slices.Max(rs))
	}
	return text
}

func drvDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.1f µs", float64(d)/1e3)
	}
}
