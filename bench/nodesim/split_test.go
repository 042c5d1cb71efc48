package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binary is also the node processes' binary: re-executed with
// childEnv set, it runs as one (split.go starts os.Executable()).
func TestMain(m *testing.M) {
	if code, ok := childMain(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// One process while nodes × servers and a reserve fit its open-files
// limit; more when they do not: this sandbox's 20,000 takes 6,333 nodes of
// 3 servers a process, so 10,000 nodes need 2.
func TestProcsFor(t *testing.T) {
	for _, c := range []struct {
		nodes, servers int
		limit          uint64
		want           int
	}{
		{1000, 3, 20000, 1},
		{5000, 3, 20000, 1},
		{6333, 3, 20000, 1},
		{6334, 3, 20000, 2},
		{10000, 3, 20000, 2},
		{10000, 3, 1 << 18, 1},
		{10000, 1, 20000, 1},
		{20000, 5, 20000, 6},
		{1000, 3, 1024, 4},        // a small limit keeps three quarters for nodes
		{10, 3, 1, 10},            // never zero nodes a process
		{10000, 3, ^uint64(0), 1}, // unlimited
		{100000, 3, 1 << 20, 1},
	} {
		if got := procsFor(c.nodes, c.servers, c.limit); got != c.want {
			t.Errorf("procsFor(%d nodes, %d servers, limit %d) = %d, want %d", c.nodes, c.servers, c.limit, got, c.want)
		}
	}
}

// -procs 2: the nodes run in two node processes (this binary re-executed),
// none in the simulator; every figure the simulator prints is still the
// whole cluster's: the job's tasks started and update calls, the volume
// scenario's phases (recorded in the node processes), the memory per node,
// the open files. No node process is left when the run ends.
func TestShortRunSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server and simulated nodes in two processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := simConfig{nodes: 40, servers: 1, bin: berthBin(t), csi: true, zones: 2, jobAllocs: 60, volumeJobs: 6, dir: t.TempDir(),
		heartbeatTTL: time.Minute, procs: 2}
	var out bytes.Buffer
	r, err := simulate(ctx, cfg, &out, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if r.Procs != 2 {
		t.Errorf("report: %d processes held the nodes, want 2", r.Procs)
	}
	if r.Job == nil || r.Job.StartedTasks != 60 || r.Job.UpdateCalls == 0 || r.Job.SimCPUSeconds <= 0 {
		t.Errorf("job: %+v (want 60 tasks started in the node processes, their update calls and CPU counted)", r.Job)
	}
	if r.SimHeapPerNode <= 0 {
		t.Errorf("memory per node not measured in the node processes: %d", r.SimHeapPerNode)
	}
	if r.Job != nil {
		_, p1 := r.Job.ProcessCPUSeconds["nodes sim-00000…sim-00019"]
		_, p2 := r.Job.ProcessCPUSeconds["nodes sim-00020…sim-00039"]
		_, leader := r.Job.ProcessCPUSeconds["server s1 (leader)"]
		if !p1 || !p2 || !leader {
			t.Errorf("the job's CPU by process: %v, want each node process and the leader", r.Job.ProcessCPUSeconds)
		}
	}
	if r.Volumes == nil || len(r.Volumes.Phases) != int(numPhases) {
		t.Fatalf("volume jobs: %+v", r.Volumes)
	}
	for _, p := range r.Volumes.Phases {
		if p.Jobs != 6 {
			t.Errorf("phase %q: %d jobs seen, want 6", p.Phase, p.Jobs)
		}
	}
	if r.Files == nil || r.Files.SimPeak <= 0 || r.Files.ServerPeak <= 0 || r.Files.SimLimit == 0 {
		t.Errorf("open files: %+v", r.Files)
	}
	if left := nodeProcsOf(t, os.Getpid()); len(left) > 0 {
		t.Errorf("node processes left after the run: %v", left)
	}
}

// nodeProcsOf lists the live children of pid that run as node processes.
func nodeProcsOf(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(env, []byte(childEnv+"=1")) {
			out = append(out, p)
		}
	}
	return out
}

// A node process whose parent goes away (its stdin closed before a stop)
// ends its nodes and exits.
func TestNodeProcessEndsWhenItsInputEnds(t *testing.T) {
	r, w := io.Pipe()
	done := make(chan int, 1)
	var out bytes.Buffer
	go func() { done <- runChild(r, &out, io.Discard) }()
	if _, err := io.WriteString(w, `{"first":0,"count":0,"servers":["127.0.0.1:1"],"nodes_dir":"`+t.TempDir()+`"}`); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d, output %s", code, out.String())
	}
	if !strings.Contains(out.String(), "{}") {
		t.Fatalf("no ready answer: %q", out.String())
	}
}

// A failed restore still reports the snapshot's size and save time, with
// why the restore failed.
func TestFailedRestoreKeepsTheSnapshotFigures(t *testing.T) {
	var b bytes.Buffer
	printReport(&b, &report{Nodes: 10000, Snapshot: &snapshotRun{Bytes: 15 << 20, SaveSeconds: 1.5,
		RestoreError: "leadership lost while committing log"}})
	if want := "| 10000 nodes | 15.0 MiB | 1.50 s | failed: leadership lost while committing log |"; !strings.Contains(b.String(), want) {
		t.Errorf("no row %q in:\n%s", want, b.String())
	}
}

// The failover prints its job's steps on the node, from the kill.
func TestFailoverStepsPrinted(t *testing.T) {
	var b bytes.Buffer
	printReport(&b, &report{Nodes: 10000, Failover: &failoverRun{ElectedSeconds: 1.32, EvalSeconds: 3.56,
		Steps: &failoverSteps{NodeSeen: 2.31, TaskStarted: 2.32, RunningSent: 3.87}}})
	if want := "seen by the node 2.31 s, task started 2.32 s, running reported (applied) 3.87 s"; !strings.Contains(b.String(), want) {
		t.Errorf("no %q in:\n%s", want, b.String())
	}
}
