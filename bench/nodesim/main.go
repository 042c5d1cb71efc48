// Command nodesim runs thousands of simulated berth client nodes in one
// process against real berth servers, to see what a large cluster costs
// the servers. `make nodesim NODES=… SERVERS=…` runs it; bench's `scale`
// section runs it at several sizes and prints the tables.
//
// Each simulated node is host/client's Client itself, not a second
// implementation of the protocol: it makes and presents its node secret,
// registers with a fingerprint (the mock driver; a CSI node plugin with
// topology), heartbeats at the TTL the servers answer, watches its allocs
// with blocking queries, runs them through the real alloc and task runners,
// batches their status updates, fingerprints its CSI plugin through the
// real plugin manager and reports claims through the real volume hooks.
// Only the host's edges are fake (node.go, csi.go, store.go): the mock
// driver called in process instead of a plugin subprocess, a fake CSI node
// plugin called in process instead of over a socket, and an in-memory
// state DB. host/client takes the simulator's extra dial options
// (Config.DialOptions) so the simulator counts the calls (calls.go).
//
// Without -addrs the simulator starts -servers real `berth` server
// processes (-bin, default build/berth) on loopback, their data dirs under
// a temp dir, with the RPC connection cap off (every simulated node
// connects from 127.0.0.1) and the job limits raised to the job it runs;
// -tls makes that cluster mutual TLS with a CA made for the run (the nodes
// present a client certificate, the API caller a cli one). With -addrs it
// joins running servers (-http names one's API; -ca-file, -cert-file,
// -key-file, -cli-cert-file, -cli-key-file their TLS files), and reports
// no server CPU.
//
// One process holds the nodes unless their connections (one to each
// server a node has talked to) would pass the open-files limit: then, or
// with -procs N, the simulator re-executes itself as node processes, each
// with a share of the nodes and a limit of its own, and adds up what they
// count (split.go, child.go).
//
// What it measures (-json writes it for bench): the time until every node
// is ready, the simulator's memory per node, the leader's CPU and resident
// set idle (before any node starts: the baseline) and in steady state, the
// heartbeats per second the nodes sent and the leader's CPU per heartbeat,
// and with -job-allocs one job of that many allocs from register to placed
// and to running.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

func main() {
	if code, ok := childMain(); ok {
		os.Exit(code)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nodesim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg simConfig
	fs.IntVar(&cfg.nodes, "nodes", 1000, "simulated client nodes")
	fs.IntVar(&cfg.servers, "servers", 3, "server processes to start (without -addrs)")
	fs.StringVar(&cfg.bin, "bin", "build/berth", "the berth binary the servers run")
	addrs := fs.String("addrs", "", "comma-separated RPC addresses of running servers (the simulator starts none)")
	fs.StringVar(&cfg.httpAddr, "http", "", "with -addrs: the HTTP API address of one of them")
	fs.BoolVar(&cfg.tls, "tls", false, "start the servers with mutual TLS (a CA made for the run)")
	var files pki
	fs.StringVar(&files.ca, "ca-file", "", "with -addrs: the CA certificate of the servers' TLS")
	fs.StringVar(&files.clientCert, "cert-file", "", "with -addrs: the nodes' client certificate")
	fs.StringVar(&files.clientKey, "key-file", "", "with -addrs: its key")
	fs.StringVar(&files.cliCert, "cli-cert-file", "", "with -addrs: the API caller's certificate")
	fs.StringVar(&files.cliKey, "cli-key-file", "", "with -addrs: its key")
	fs.DurationVar(&cfg.heartbeatTTL, "heartbeat-ttl", 0, "the servers' heartbeat_ttl (0: their default, 10s)")
	fs.BoolVar(&cfg.csi, "csi", true, "give every node the fake CSI node plugin (with topology)")
	fs.IntVar(&cfg.zones, "zones", 3, "topology zones the nodes' CSI plugins spread over")
	fs.DurationVar(&cfg.idle, "idle", 5*time.Second, "the leader's baseline window, before any node starts (0: none)")
	fs.DurationVar(&cfg.steady, "steady", 30*time.Second, "the steady-state window, once every node is ready")
	fs.IntVar(&cfg.jobAllocs, "job-allocs", 0, "then run one job of this many allocs (0: none)")
	fs.IntVar(&cfg.volumeJobs, "volume-jobs", 0, "then run this many jobs, each with a single-writer CSI volume of its own (0: none)")
	fs.BoolVar(&cfg.failover, "kill-leader", false, "then kill the leader (SIGKILL) and measure the failover")
	fs.DurationVar(&cfg.failoverWatch, "failover-watch", 30*time.Second, "after the new leader is elected, watch the nodes this long for any marked down")
	fs.BoolVar(&cfg.snapshot, "snapshot", false, "last, save a snapshot of the state and restore it")
	hold := fs.Bool("hold", false, "keep the nodes running after the scenarios until interrupted")
	jsonOut := fs.String("json", "", "write the report as JSON to this file")
	logLevel := fs.String("log-level", "off", "the simulated nodes' log level, to stderr (off, error, warn, info, debug)")
	cpuProfile := fs.String("cpuprofile", "", "write the simulator's CPU profile to this file")
	fs.StringVar(&cfg.jobProfileDir, "job-profile", "", "profile the simulator (pprof) and the servers (perf record) while the -job-allocs job runs, into this dir")
	keep := fs.Bool("keep", false, "keep the temp dir (server data dirs and logs) after the run")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	gcPercent := fs.Int("gc-percent", defaultGCPercent, "the simulator's GOGC (0: Go's default; the GOGC environment variable wins)")
	memDirs := fs.Bool("shm", false, "put the nodes' data dirs on /dev/shm when it exists")
	fs.IntVar(&cfg.procs, "procs", 0, "processes to run the nodes in: 1 this one, N>1 that many node processes (this binary re-executed); "+
		"0: more than one only when nodes × servers would pass the open-files limit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *addrs != "" {
		cfg.addrs = strings.Split(*addrs, ",")
		if cfg.httpAddr == "" {
			fmt.Fprintln(stderr, "nodesim: -addrs needs -http (one server's HTTP API address)")
			return 2
		}
		if files.ca != "" {
			cfg.tlsFiles = &files
		}
	}
	if cfg.nodes <= 0 {
		fmt.Fprintln(stderr, "nodesim: -nodes must be positive")
		return 2
	}
	if cfg.procs < 0 || cfg.procs > cfg.nodes {
		fmt.Fprintln(stderr, "nodesim: -procs must be between 0 and -nodes")
		return 2
	}
	cfg.logLevel, cfg.gcPercent = *logLevel, *gcPercent
	dir, err := os.MkdirTemp("", "nodesim-")
	if err != nil {
		fmt.Fprintln(stderr, "nodesim:", err)
		return 1
	}
	if *keep {
		fmt.Fprintln(stderr, "nodesim: keeping", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	cfg.dir = dir
	tuneGC(*gcPercent)
	raiseFileLimit()
	if cfg.procs == 0 {
		servers := cfg.servers
		if cfg.addrs != nil {
			servers = len(cfg.addrs)
		}
		cfg.procs = procsFor(cfg.nodes, servers, fileLimit())
	}
	if *memDirs {
		var cleanup func()
		cfg.nodesDir, cleanup = nodesRoot(dir)
		defer cleanup()
	}
	if cfg.addrs == nil {
		if cfg.bin, err = filepath.Abs(cfg.bin); err != nil {
			fmt.Fprintln(stderr, "nodesim:", err)
			return 1
		}
	}
	if lvl := hclog.LevelFromString(*logLevel); lvl != hclog.NoLevel && lvl != hclog.Off {
		cfg.logger = hclog.New(&hclog.LoggerOptions{Name: "nodesim", Level: lvl, Output: stderr})
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "nodesim:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "nodesim:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()
	rep, err := simulate(ctx, cfg, stdout, *hold)
	if err != nil && rep != nil {
		// What was measured before the failure.
		printReport(stdout, rep)
	}
	if rep != nil && *jsonOut != "" {
		b, jerr := json.MarshalIndent(rep, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(*jsonOut, b, 0o644)
		}
		if jerr != nil {
			fmt.Fprintln(stderr, "nodesim:", jerr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "nodesim:", err)
		return 1
	}
	return 0
}

// simulate runs the scenarios cfg asks for, printing as it goes.
func simulate(ctx context.Context, cfg simConfig, out io.Writer, hold bool) (*report, error) {
	s, err := startSim(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	defer func() {
		c, err := s.counts()
		if err != nil {
			fmt.Fprintf(out, "\nheartbeats: not counted: %v\n", err)
			return
		}
		fmt.Fprintf(out, "\nheartbeats: %d sent, %d failed, slowest %s\n", c.heartbeats(), c.failed,
			time.Duration(c.slowest).Round(time.Millisecond))
	}()
	r := s.report
	r.Procs = max(s.cfg.procs, 1)
	files := s.watchFiles()
	defer s.endFiles(files)
	if cfg.idle > 0 && s.servers != nil {
		if r.Idle, err = s.measure(ctx, cfg.idle); err != nil {
			return r, err
		}
	}
	fmt.Fprintf(out, "starting %d nodes against %d servers (tls %v, csi %v) in %d processes\n", cfg.nodes, len(s.cfg.addrs), r.TLS, cfg.csi, r.Procs)
	if err := s.startNodes(ctx); err != nil {
		return r, err
	}
	fmt.Fprintf(out, "%d nodes ready in %.1f s; simulator memory per node: %s heap+stacks, %s resident\n",
		cfg.nodes, r.ReadySeconds, fmtBytes(r.SimHeapPerNode), fmtBytes(r.SimRSSPerNode))
	if cfg.steady > 0 && s.servers != nil {
		if r.Steady, err = s.measure(ctx, cfg.steady); err != nil {
			return r, err
		}
	}
	if cfg.jobAllocs > 0 {
		if r.Job, err = s.runProfiledJob(ctx, "nodesim-job", cfg.jobAllocs, out); err != nil {
			return r, err
		}
	}
	if cfg.volumeJobs > 0 {
		if r.Volumes, err = s.runVolumeJobs(ctx, cfg.volumeJobs); err != nil {
			return r, err
		}
	}
	if cfg.failover {
		if r.Failover, err = s.failover(ctx, cfg.failoverWatch); err != nil {
			return r, err
		}
	}
	if cfg.snapshot {
		if r.Snapshot, err = s.snapshot(ctx); err != nil {
			return r, err
		}
	}
	s.endFiles(files)
	printReport(out, r)
	if hold {
		fmt.Fprintln(out, "holding the nodes until interrupted")
		<-ctx.Done()
	}
	return r, nil
}

func printReport(w io.Writer, r *report) {
	fmt.Fprintf(w, "\n| window | leader CPU (%% of a core) | followers' CPU | leader RSS | heartbeats/s | leader CPU per heartbeat | simulator CPU |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, x := range []struct {
		name string
		w    *window
	}{{"idle (no nodes)", r.Idle}, {fmt.Sprintf("steady, %d nodes", r.Nodes), r.Steady}} {
		if x.w == nil {
			continue
		}
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %s | %.0f | %.0f µs | %.1f |\n", x.name, x.w.LeaderCPU, x.w.FollowerCPU,
			fmtBytes(x.w.LeaderRSS), x.w.Heartbeats, x.w.HeartbeatCPU, x.w.SimCPU)
	}
	if r.Steady != nil && len(r.Steady.Calls) > 0 {
		methods := slices.Sorted(maps.Keys(r.Steady.Calls))
		var parts []string
		for _, m := range methods {
			parts = append(parts, fmt.Sprintf("%s %.1f", m, r.Steady.Calls[m]))
		}
		fmt.Fprintf(w, "\nsteady calls/s: %s\n", strings.Join(parts, ", "))
	}
	if r.Job != nil {
		j := r.Job
		fmt.Fprintf(w, "\n| job | placed | running | placements/s | leader CPU | followers' CPU | simulator CPU | tasks started |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
		fmt.Fprintf(w, "| %d allocs on %d nodes | %.2f s | %.2f s | %.0f | %.2f s | %.2f s | %.2f s | %d |\n", j.Allocs, r.Nodes, j.PlacedSeconds,
			j.RunningSeconds, float64(j.Allocs)/j.RunningSeconds, j.LeaderCPUSeconds, j.FollowersCPUSeconds, j.SimCPUSeconds, j.StartedTasks)
		fmt.Fprintf(w, "alloc update calls: %d (%.2f per alloc); raft entries: %d\n", j.UpdateCalls, float64(j.UpdateCalls)/float64(max(j.Allocs, 1)), j.RaftEntries)
		fmt.Fprintf(w, "alloc updates: %d (%.2f per alloc) %s\n", j.AllocUpdates, float64(j.AllocUpdates)/float64(max(j.Allocs, 1)), fmtCounts(j.AllocUpdatesByStatus))
		printProcessCPU(w, j.ProcessCPUSeconds)
	}
	printScenarios(w, r)
	if f := r.Files; f != nil {
		fmt.Fprintf(w, "\nopen files, the most one process held (sampled every %s): a server %d (limit %d), a simulator process %d (limit %d); processes holding the nodes: %d\n",
			filesSampleEvery, f.ServerPeak, f.ServerLimit, f.SimPeak, f.SimLimit, r.Procs)
	}
}

func printScenarios(w io.Writer, r *report) {
	if v := r.Volumes; v != nil {
		fmt.Fprintf(w, "\n| volume jobs | all running, claims in use | placements with claims/s |\n|---|--:|--:|\n")
		fmt.Fprintf(w, "| %d on %d nodes | %.2f s | %.0f |\n", v.Jobs, r.Nodes, v.RunningSeconds, float64(v.Jobs)/v.RunningSeconds)
		if v.RegisterWidth > 0 {
			fmt.Fprintf(w, "\nregister calls, %d at a time: p50 %s, p99 %s\n", v.RegisterWidth, fmtSeconds(v.RegisterP50), fmtSeconds(v.RegisterP99))
		}
		if len(v.Phases) > 0 {
			printPhases(w, v.Phases)
		}
	}
	if f := r.Failover; f != nil {
		fmt.Fprintf(w, "\n| leader killed | new leader | a new job accepted (duties started) | placed (evaluations run) | running on a node | nodes marked down (watched %.0f s) |\n|---|--:|--:|--:|--:|--:|\n", f.WatchSeconds)
		fmt.Fprintf(w, "| %d nodes | %.2f s | %.2f s | %.2f s | %.2f s | %d |\n", r.Nodes, f.ElectedSeconds, f.AcceptedSeconds, f.PlacedSeconds,
			f.EvalSeconds, f.NodesDown)
		if st := f.Steps; st != nil {
			fmt.Fprintf(w, "\nthe failover job's alloc on its node, from the kill: seen by the node %.2f s, task started %.2f s, running reported (applied) %.2f s\n",
				st.NodeSeen, st.TaskStarted, st.RunningSent)
		}
		fmt.Fprintf(w, "\nthe killed server, started again, caught up in %.2f s\n", f.RejoinSeconds)
	}
	if sn := r.Snapshot; sn != nil {
		fmt.Fprintf(w, "\n| snapshot | size | save | restore |\n|---|--:|--:|--:|\n")
		restore := fmt.Sprintf("%.2f s", sn.RestoreSeconds)
		if sn.RestoreError != "" {
			restore = "failed: " + sn.RestoreError
		}
		fmt.Fprintf(w, "| %d nodes | %s | %.2f s | %s |\n", r.Nodes, fmtBytes(sn.Bytes), sn.SaveSeconds, restore)
	}
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30 || n <= -1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20 || n <= -1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 || n <= -1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
