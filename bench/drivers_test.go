package main

import (
	"context"
	"testing"
	"time"
)

// TestDriversSmoke runs the drivers section's quick plan end to end: real
// plugin subprocesses (this test binary, through the init hook) and real
// raw_exec executors, with every figure measured.
func TestDriversSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := runDrivers(ctx, quickDriverPlan)
	if err != nil {
		t.Fatal(err)
	}
	for side := range 2 {
		if len(rep.mockStart[side]) != quickDriverPlan.rounds || len(rep.mockStart[side][0]) != quickDriverPlan.starts {
			t.Errorf("side %d: mock starts %v", side, rep.mockStart[side])
		}
		if rep.mockRate[side][0] <= 0 || drvPercentile(rep.rawExit[side][0], 0.5) <= 0 {
			t.Errorf("side %d: rate %v raw_exec exits %v", side, rep.mockRate[side], rep.rawExit[side])
		}
	}
	if len(rep.launch) != quickDriverPlan.launches || rep.launch[0] <= 0 {
		t.Errorf("launches %v", rep.launch)
	}
}
