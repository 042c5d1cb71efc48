package main

import (
	"fmt"
	"io"
)

// scalePhase is one step of the volume scenario's breakdown
// (bench/nodesim's phaseStat): when the first, the median and the last job
// passed it, seconds from the first register call, and the per-job step
// from the phase before.
type scalePhase struct {
	Phase    string  `json:"phase"`
	Jobs     int     `json:"jobs"`
	FirstAt  float64 `json:"first_at_seconds"`
	MedianAt float64 `json:"median_at_seconds"`
	AllBy    float64 `json:"all_by_seconds"`
	StepP50  float64 `json:"step_p50_seconds"`
	StepP99  float64 `json:"step_p99_seconds"`
	StepMax  float64 `json:"step_max_seconds"`
}

// printVolumePhases prints, per size, where the volume jobs' time went:
// the phases in the order a job passes them. A phase whose last job comes
// much later than the one before's is the bottleneck; a large step p50
// with little spread is a latency every job pays.
func printVolumePhases(w io.Writer, reps []*scaleReport) {
	for _, r := range reps {
		v := r.Volumes
		if v == nil || len(v.Phases) == 0 {
			continue
		}
		if v.RegisterWidth > 0 {
			fmt.Fprintf(w, "\n%d volume jobs at %d nodes: register calls %d at a time took p50 %s, p99 %s (the run takes about jobs ÷ width × p50 when every later phase keeps up)\n",
				v.Jobs, r.Nodes, v.RegisterWidth, scaleSeconds(v.RegisterP50), scaleSeconds(v.RegisterP99))
		}
		fmt.Fprintf(w, "\n| %d volume jobs, %d nodes: phase | jobs | first | median job | last job | step p50 | step p99 | step max |\n|---|--:|--:|--:|--:|--:|--:|--:|\n",
			v.Jobs, r.Nodes)
		for _, p := range v.Phases {
			fmt.Fprintf(w, "| %s | %d | %.2f s | %.2f s | %.2f s | %s | %s | %s |\n", p.Phase, p.Jobs, p.FirstAt, p.MedianAt, p.AllBy,
				scaleSeconds(p.StepP50), scaleSeconds(p.StepP99), scaleSeconds(p.StepMax))
		}
	}
}

func scaleSeconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}
