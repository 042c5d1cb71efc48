package main

import (
	"strings"
	"testing"
	"time"
)

// cellsWithRatio returns one round per ratio at every configuration, berth
// running at ratio × the baseline's 1000 ops/s.
func cellsWithRatio(ratios map[int]float64) map[raftCell]*cellRuns {
	cells := map[raftCell]*cellRuns{}
	for servers, ratio := range ratios {
		for _, procs := range raftProposerCounts {
			cells[raftCell{servers, procs}] = &cellRuns{
				baseline: []loadResult{{ops: 1000, elapsed: time.Second}},
				berth:    []loadResult{{ops: int(ratio * 1000), elapsed: time.Second}},
			}
		}
	}
	return cells
}

func TestSummaryQuotesEveryPayloadAndJudgesNothing(t *testing.T) {
	rep := raftReport{payloads: []*payloadReport{
		{spec: payloadSpec{name: "real"}, entryBytes: 300, cells: cellsWithRatio(map[int]float64{1: 0.95, 3: 0.85})},
		{spec: payloadSpec{name: "stress"}, entryBytes: 5300, cells: cellsWithRatio(map[int]float64{1: 0.5, 3: 0.75})},
	}}
	got := rep.summary()
	for _, want := range []string{
		"on the real payload: 1 server 0.95; 3 servers 0.85.",
		"Stress payload (5300 bytes per entry): 1 server 0.50; 3 servers 0.75.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q\nlacks %q", got, want)
		}
	}
	if strings.Contains(got, "met") || strings.Contains(got, "≥") {
		t.Errorf("summary %q judges a target; the raft table is information only", got)
	}
}

func TestSummarySkipsUnmeasuredConfigurations(t *testing.T) {
	rep := raftReport{payloads: []*payloadReport{
		{spec: payloadSpec{name: "real"}, cells: cellsWithRatio(map[int]float64{3: 0.92})},
	}}
	got := rep.summary()
	if strings.Contains(got, "1 server") || !strings.Contains(got, "3 servers 0.92.") {
		t.Errorf("summary %q: want only the measured 3-server configuration", got)
	}
}

func TestSummaryQuotesTheMemdbFloor(t *testing.T) {
	cells := cellsWithRatio(map[int]float64{1: 0.8, 3: 0.88})
	for cell, runs := range cells {
		if cell.servers == 1 {
			runs.floor = []loadResult{{ops: 830, elapsed: time.Second}}
		}
	}
	rep := raftReport{payloads: []*payloadReport{{spec: payloadSpec{name: "real"}, cells: cells}}}
	got := rep.summary()
	want := "The go-memdb floor (one insert per command and nothing else) reaches, in the same rounds: 1 server 0.83."
	if !strings.Contains(got, want) {
		t.Errorf("summary %q\nlacks %q", got, want)
	}
	without := raftReport{payloads: []*payloadReport{{spec: payloadSpec{name: "real"}, cells: cellsWithRatio(map[int]float64{1: 0.8})}}}
	if strings.Contains(without.summary(), "floor") {
		t.Errorf("summary %q quotes a floor that was not measured", without.summary())
	}
}
