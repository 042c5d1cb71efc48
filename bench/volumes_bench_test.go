package main

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
)

var (
	benchStatesOnce sync.Once
	benchStates     map[string]*builtState
	benchStatesErr  error
)

// volumeBenchStates builds the section's empty and full-size large state
// once per test binary.
func volumeBenchStates(b *testing.B) map[string]*builtState {
	b.Helper()
	benchStatesOnce.Do(func() {
		l := fullVolPlan.large
		var large, empty *builtState
		if large, benchStatesErr = l.build(); benchStatesErr != nil {
			return
		}
		if empty, benchStatesErr = (volumeState{targets: l.targets}).build(); benchStatesErr != nil {
			return
		}
		benchStates = map[string]*builtState{"empty": empty, "large": large}
	})
	if benchStatesErr != nil {
		b.Fatal(benchStatesErr)
	}
	return benchStates
}

// BenchmarkVolumePlanApply applies the section's measured plan to the
// FSM restored from the empty and the large state, one command per apply
// and in raft batches of 64 (the FSM's work per command at 64 proposers),
// restoring the state every 6,400 commands so the target volumes' claims
// grow as they do in one cluster run. For profiling the section:
// go test -run '^$' -bench VolumePlanApply -cpuprofile cpu.prof ./internal/bench
//
// Beside ns/op (wall time) it reports cpu-ns/op, the process's CPU time
// per command while the timer runs, garbage collection included: on a
// machine other work shares, the steadier of the two.
func BenchmarkVolumePlanApply(b *testing.B) {
	states := volumeBenchStates(b)
	for _, name := range []string{"empty", "large"} {
		st := states[name]
		for _, batch := range []int{1, fsmOnlyBatch} {
			b.Run(fmt.Sprintf("%s/batch=%d", name, batch), func(b *testing.B) {
				const restoreEvery = 100 * fsmOnlyBatch
				p := &planProposals{targets: fullVolPlan.large.targets}
				entries := make([][]byte, restoreEvery)
				for i := range entries {
					entries[i] = p.next()
				}
				var f *fsm.FSM
				index := st.index
				logs := make([]*raft.Log, 0, batch)
				// cpu adds up the process's CPU time while the timer runs:
				// the figure other work on a shared machine barely moves
				// (ns/op is wall time), garbage collection included.
				var cpu time.Duration
				cpuOK := true
				cpuStart, ok := processCPU()
				cpuOK = cpuOK && ok
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i += batch {
					if i%restoreEvery == 0 {
						b.StopTimer()
						now, ok := processCPU()
						cpu, cpuOK = cpu+now-cpuStart, cpuOK && ok
						var err error
						if f, err = restoreFSM(st.snapshot); err != nil {
							b.Fatal(err)
						}
						index = st.index
						// The replaced FSM's garbage is not the next
						// commands' cost.
						runtime.GC()
						cpuStart, ok = processCPU()
						cpuOK = cpuOK && ok
						b.StartTimer()
					}
					logs = logs[:0]
					for k := range batch {
						index++
						logs = append(logs, &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: entries[(i+k)%restoreEvery]})
					}
					for _, res := range f.ApplyBatch(logs) {
						if err := checkPlanPlaced(res); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				now, ok := processCPU()
				cpu, cpuOK = cpu+now-cpuStart, cpuOK && ok
				if cpuOK {
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}
