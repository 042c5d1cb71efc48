package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The scale section's tables come from the simulator's JSON report: every
// scenario gets its row, with the ratios and rates computed from it.
func TestScaleTables(t *testing.T) {
	var r scaleReport
	const report = `{"nodes": 1000, "servers": 3, "ready_seconds": 4.5, "sim_heap_per_node": 204800, "sim_rss_per_node": 262144,
	  "idle": {"leader_cpu_pct": 2, "leader_rss": 33554432},
	  "steady": {"leader_cpu_pct": 10, "leader_rss": 138412032, "heartbeats_per_s": 340, "heartbeat_cpu_us": 290},
	  "job": {"allocs": 10000, "placed_seconds": 1.5, "running_seconds": 5, "leader_cpu_seconds": 3, "followers_cpu_seconds": 4, "sim_cpu_seconds": 5},
	  "volumes": {"jobs": 1000, "running_seconds": 10, "register_width": 16, "register_p50_seconds": 0.1, "register_p99_seconds": 0.35, "phases": [
	    {"phase": "register call sent", "jobs": 1000, "first_at_seconds": 0, "median_at_seconds": 3, "all_by_seconds": 6.25},
	    {"phase": "placed", "jobs": 1000, "first_at_seconds": 0.1, "median_at_seconds": 3.2, "all_by_seconds": 6.5,
	     "step_p50_seconds": 0.12, "step_p99_seconds": 0.4, "step_max_seconds": 1.5}]},
	  "failover": {"elected_seconds": 1.2, "accepted_seconds": 1.4, "placed_seconds": 1.6, "eval_seconds": 2.5, "watch_seconds": 30, "nodes_down": 0},
	  "snapshot": {"bytes": 10485760, "save_seconds": 0.2, "restore_seconds": 0.8}}`
	if err := jsonUnmarshal(report, &r); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printScale(&b, []*scaleReport{&r}, 2, false)
	out := b.String()
	for _, want := range []string{
		"| 1000 nodes | 10.0 | 2.0 | 5.0× | 132.0 MiB | 102.4 KiB | 340 | 290 µs | 4.5 s | 200.0 KiB, 256.0 KiB |",
		"| 1000 nodes | 10000 | 1.50 s | 5.00 s | 2000 | 1000 | ~1,500 | 3.0 s, 4.0 s, 5.0 s | 6.0 s |",
		"| 1000 nodes | 1000 | 10.00 s | 100 |",
		"register calls 16 at a time took p50 100 ms, p99 350 ms",
		"| 1000 volume jobs, 1000 nodes: phase | jobs |",
		"| register call sent | 1000 | 0.00 s | 3.00 s | 6.25 s | 0 ms | 0 ms | 0 ms |",
		"| placed | 1000 | 0.10 s | 3.20 s | 6.50 s | 120 ms | 400 ms | 1.50 s |",
		"| 1000 nodes | 1.20 s | 1.40 s | 1.60 s | 2.50 s | 0 | 30 s |",
		"| 1000 nodes | 10.0 MiB | 0.20 s | 0.80 s |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no row %q in:\n%s", want, out)
		}
	}
}

func TestScalePlanFromEnv(t *testing.T) {
	t.Setenv("SCALE_NODES", "1000, 5000,10000")
	t.Setenv("SCALE_ALLOCS", "2000")
	p, err := scalePlanFromEnv(false)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.sizes) != 3 || p.sizes[2] != 10000 || p.allocs != 2000 || p.volumeJobs != 1000 {
		t.Fatalf("plan %+v", p)
	}
	t.Setenv("SCALE_NODES", "issue")
	t.Setenv("SCALE_ALLOCS", "")
	if p, err = scalePlanFromEnv(false); err != nil || len(p.sizes) != 3 || p.sizes[2] != 10000 || p.allocs != 10000 {
		t.Fatalf("SCALE_NODES=issue: plan %+v, %v", p, err)
	}
	t.Setenv("SCALE_NODES", "1000,many")
	if _, err := scalePlanFromEnv(false); err == nil || !strings.Contains(err.Error(), `"many"`) {
		t.Fatalf("SCALE_NODES with a word: %v", err)
	}
}

// SCALE_LOCK: a simulator run waits for the lock another holds.
func TestScaleRunLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	go func() {
		_ = runLocked(path, func() error { close(ran); return nil })
	}()
	select {
	case <-ran:
		t.Fatal("ran while another held the lock")
	case <-time.After(100 * time.Millisecond): // a window in which the run would show
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	<-ran
}

// The open files each size took, and over how many processes the
// simulator split its nodes.
func TestScaleFilesTable(t *testing.T) {
	var r scaleReport
	const report = `{"nodes": 10000, "procs": 2, "files": {"server_peak": 10412, "server_limit": 20000, "sim_peak": 5311, "sim_limit": 20000}}`
	if err := jsonUnmarshal(report, &r); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printScale(&b, []*scaleReport{&r}, 2, false)
	if want := "| 10000 nodes | 10412 | 20000 | 5311 | 20000 | 2 |"; !strings.Contains(b.String(), want) {
		t.Errorf("no row %q in:\n%s", want, b.String())
	}
}

// A size whose restore failed shows why, beside the snapshot's size.
func TestScaleFailedRestoreRow(t *testing.T) {
	var r scaleReport
	const report = `{"nodes": 10000, "snapshot": {"bytes": 15728640, "save_seconds": 1.5, "restore_error": "leadership lost"}}`
	if err := jsonUnmarshal(report, &r); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printScale(&b, []*scaleReport{&r}, 2, false)
	if want := "| 10000 nodes | 15.0 MiB | 1.50 s | failed: leadership lost |"; !strings.Contains(b.String(), want) {
		t.Errorf("no row %q in:\n%s", want, b.String())
	}
}

// A size whose run failed keeps what it measured (the simulator writes its
// report before exiting with the error), and the next size still runs.
func TestScaleFailedSizeKeepsItsFigures(t *testing.T) {
	var ran []int
	reps, err := runScaleSizes([]int{1000, 5000, 10000}, t.TempDir(), func(n int, out string) error {
		ran = append(ran, n)
		switch n {
		case 5000: // failed before any report
			return errors.New("no leader")
		case 10000:
			if err := os.WriteFile(out, []byte(`{"nodes": 10000, "snapshot": {"restore_error": "leadership lost"}}`), 0o644); err != nil {
				return err
			}
			return errors.New("exit status 1")
		}
		return os.WriteFile(out, []byte(`{"nodes": 1000}`), 0o644)
	})
	if len(ran) != 3 {
		t.Fatalf("ran %v, want every size", ran)
	}
	if len(reps) != 2 || reps[0].Nodes != 1000 || reps[1].Nodes != 10000 || reps[1].Snapshot == nil {
		t.Fatalf("reports %+v", reps)
	}
	if err == nil || !strings.Contains(err.Error(), "5000 nodes: no leader") || !strings.Contains(err.Error(), "10000 nodes: exit status 1") {
		t.Fatalf("error %v", err)
	}
}
