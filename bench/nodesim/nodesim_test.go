package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// berthBin is the berth binary the servers run: BERTH_BIN, else
// build/berth when make built it, else one built for the test.
func berthBin(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("BERTH_BIN"); b != "" {
		return b
	}
	if b, err := filepath.Abs(filepath.Join("..", "..", "build", "berth")); err == nil {
		if _, err := os.Stat(b); err == nil {
			return b
		}
	}
	b := filepath.Join(t.TempDir(), "berth")
	cmd := exec.Command("go", "build", "-o", b, "../..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building berth: %v\n%s", err, out)
	}
	return b
}

// The short real run of make test: 200 simulated nodes against one real
// server, every node ready with its CSI plugin healthy, then a job of 500
// allocs placed and every alloc running (the servers' summary) with every
// task started by the nodes' drivers, then 30 jobs each with a
// single-writer volume of its own, running with every claim in use and
// every job seen through each phase of the breakdown.
func TestShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server and 200 simulated nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A TTL well above the default: the test asserts what the nodes run,
	// not how fast a machine busy with the rest of make test answers
	// heartbeats.
	cfg := simConfig{nodes: 200, servers: 1, bin: berthBin(t), csi: true, zones: 3, jobAllocs: 500, volumeJobs: 30, dir: t.TempDir(),
		heartbeatTTL: time.Minute}
	r, err := simulate(ctx, cfg, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Job == nil || r.Job.RunningSeconds <= 0 {
		t.Fatalf("the job did not run: %+v", r.Job)
	}
	if r.Job.StartedTasks != 500 {
		t.Fatalf("the simulated drivers started %d tasks, want 500", r.Job.StartedTasks)
	}
	// Every alloc reported running at least once, in the calls counted.
	if r.Job.AllocUpdatesByStatus["RUNNING"] < 500 || r.Job.AllocUpdates < r.Job.AllocUpdatesByStatus["RUNNING"] {
		t.Fatalf("alloc updates counted: %d, by status %v; want at least 500 running", r.Job.AllocUpdates, r.Job.AllocUpdatesByStatus)
	}
	if r.SimHeapPerNode <= 0 {
		t.Fatalf("simulator memory per node not measured: %d", r.SimHeapPerNode)
	}
	if r.Volumes == nil || r.Volumes.ClaimsInUse != 30 || len(r.Volumes.Phases) != int(numPhases) {
		t.Fatalf("volume jobs: %+v", r.Volumes)
	}
	for _, p := range r.Volumes.Phases {
		if p.Jobs != 30 {
			t.Errorf("phase %q: %d jobs seen, want 30", p.Phase, p.Jobs)
		}
	}
}

// -tls: the servers run mutual TLS (RPC and HTTPS) with a CA made for the
// run; the simulated nodes present a client certificate and still register,
// heartbeat and run their allocs (a plaintext node would not get through).
func TestShortRunTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server and simulated nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	profiles := t.TempDir()
	cfg := simConfig{nodes: 20, servers: 1, bin: berthBin(t), tls: true, csi: true, zones: 2, jobAllocs: 40, dir: t.TempDir(), jobProfileDir: profiles,
		heartbeatTTL: time.Minute}
	r, err := simulate(ctx, cfg, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if !r.TLS || r.Job == nil || r.Job.StartedTasks != 40 {
		t.Fatalf("report: tls %v, job %+v", r.TLS, r.Job)
	}
	// -job-profile: the simulator's own profile of the job is always
	// written (perf's of the servers only where perf may record).
	if fi, err := os.Stat(filepath.Join(profiles, "sim.pprof")); err != nil || fi.Size() == 0 {
		t.Fatalf("the simulator's job profile: %v", err)
	}
}
