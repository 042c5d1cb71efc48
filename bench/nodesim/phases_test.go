package main

import (
	"testing"
	"time"
)

// Each phase's step is from the latest earlier phase the job reached (a
// phase it skipped does not count), and a phase no job reached is empty.
func TestPhaseStats(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	var a, b volumeJobTimes
	a[phaseRegistered], a[phaseEvaluated], a[phasePlaced] = at(0), at(100), at(150)
	b[phaseRegistered], b[phasePlaced] = at(10), at(410) // b's evaluation unseen
	ps := phaseStats(start, []volumeJobTimes{a, b})
	if len(ps) != int(numPhases) {
		t.Fatalf("%d phases, want %d", len(ps), numPhases)
	}
	placed := ps[phasePlaced]
	if placed.Jobs != 2 || placed.FirstAt != 0.15 || placed.AllBy != 0.41 {
		t.Errorf("placed: %+v, want 2 jobs, first at 0.15 s, all by 0.41 s", placed)
	}
	// a: 50 ms after its evaluation; b: 400 ms after its register call.
	if placed.StepP50 != 0.05 || placed.StepMax != 0.4 {
		t.Errorf("placed steps: p50 %v max %v, want 0.05 and 0.4", placed.StepP50, placed.StepMax)
	}
	if ev := ps[phaseEvaluated]; ev.Jobs != 1 || ev.StepMax != 0.1 {
		t.Errorf("evaluated: %+v, want 1 job, step 0.1 s", ev)
	}
	if ps[phaseStaged].Jobs != 0 {
		t.Errorf("staged: %+v, want no job", ps[phaseStaged])
	}
}
