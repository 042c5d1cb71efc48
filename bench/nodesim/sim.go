package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// simConfig is one simulator run.
type simConfig struct {
	// nodes is how many client nodes to simulate.
	nodes int
	// servers is how many server processes to start (bin), unless addrs
	// names running ones.
	servers int
	bin     string
	// addrs are running servers' RPC addresses, httpAddr one's HTTP API.
	addrs    []string
	httpAddr string
	// tls starts the servers with mutual TLS (a CA made for the run);
	// with addrs, tlsFiles are the CA and the client and cli certificates.
	tls      bool
	tlsFiles *pki
	// csi gives every node the fake CSI node plugin, over zones zones.
	csi   bool
	zones int
	// idle is the window the leader is measured in before any node starts
	// (the baseline); steady the window with every node ready.
	idle, steady time.Duration
	// jobAllocs, when positive, runs one job of that many allocs.
	jobAllocs int
	// volumeJobs, when positive, runs that many jobs with a CSI volume each.
	volumeJobs int
	// failover kills the leader and watches the nodes for failoverWatch.
	failover      bool
	failoverWatch time.Duration
	// snapshot saves and restores the final state.
	snapshot bool
	// heartbeatTTL, when set, is the servers' shortest heartbeat TTL.
	heartbeatTTL time.Duration
	// dir holds the servers' data dirs, and the nodes' unless nodesDir
	// names another place (host.go).
	dir      string
	nodesDir string
	logger   hclog.Logger
	// jobProfileDir, when set, receives CPU profiles of every process
	// while the job scenario runs (profile.go).
	jobProfileDir string
	// procs is how many node processes hold the nodes (split.go): 1
	// runs them in this process. logLevel and gcPercent are passed on
	// to the node processes.
	procs     int
	logLevel  string
	gcPercent int
}

// sim is a running simulation: the servers (when it started them) and the
// nodes.
type sim struct {
	cfg     simConfig
	servers []*server
	pki     *pki
	api     *api.Client
	nodes   []*simNode
	calls   *callCounter
	report  *report
	// phases records the volume scenario's steps on the nodes.
	phases *phaseLog
	// procs are the node processes, when the nodes run in others
	// (split.go); procsMu guards the slice for the open-files sampler.
	procs   []*nodeProc
	procsMu sync.Mutex
}

// report is what a run measured; bench's scale section reads it (-json).
type report struct {
	Nodes   int  `json:"nodes"`
	Servers int  `json:"servers"`
	TLS     bool `json:"tls"`
	CSI     bool `json:"csi"`
	// ReadySeconds is from the first node's start to every node ready
	// on the servers.
	ReadySeconds float64 `json:"ready_seconds"`
	// SimBytesPerNode is the simulator's memory per node: Go heap and
	// stacks in use (after a collection), and resident set growth.
	SimHeapPerNode int64        `json:"sim_heap_per_node"`
	SimRSSPerNode  int64        `json:"sim_rss_per_node"`
	Idle           *window      `json:"idle,omitempty"`
	Steady         *window      `json:"steady,omitempty"`
	Job            *jobRun      `json:"job,omitempty"`
	Volumes        *volumeRun   `json:"volumes,omitempty"`
	Failover       *failoverRun `json:"failover,omitempty"`
	Snapshot       *snapshotRun `json:"snapshot,omitempty"`
	// Procs is how many processes held the nodes (1: the simulator
	// itself; more: node processes, split.go).
	Procs int `json:"procs"`
	// Files are the open files over the run (sampled every 5 s): the
	// most one server held, the most one simulator process held, and
	// each one's limit.
	Files *filesRun `json:"files,omitempty"`
}

// filesRun is the open files the run took, against the limit.
type filesRun struct {
	ServerPeak  int    `json:"server_peak"`
	ServerLimit uint64 `json:"server_limit"`
	SimPeak     int    `json:"sim_peak"`
	SimLimit    uint64 `json:"sim_limit"`
}

// window is the servers measured over a stretch of time.
type window struct {
	Seconds float64 `json:"seconds"`
	// LeaderCPU is the leader's CPU time over the window, in percent of
	// one core; FollowerCPU the followers' mean.
	LeaderCPU   float64 `json:"leader_cpu_pct"`
	FollowerCPU float64 `json:"follower_cpu_pct"`
	LeaderRSS   int64   `json:"leader_rss"`
	// Heartbeats is the nodes' heartbeats per second over the window;
	// HeartbeatCPU the leader's CPU time per heartbeat (all of its CPU,
	// idle cost included), in microseconds.
	Heartbeats   float64 `json:"heartbeats_per_s"`
	HeartbeatCPU float64 `json:"heartbeat_cpu_us"`
	// SimCPU is the simulator's own CPU over the window (percent of one core).
	SimCPU float64 `json:"sim_cpu_pct"`
	// Calls is the nodes' calls to the servers per second over the
	// window, by method.
	Calls map[string]float64 `json:"calls_per_s,omitempty"`
}

// jobRun is one job of many allocs, registered to running.
type jobRun struct {
	Allocs int `json:"allocs"`
	// PlacedSeconds is from the register call to every alloc placed;
	// RunningSeconds to every alloc running as the servers see it.
	PlacedSeconds  float64 `json:"placed_seconds"`
	RunningSeconds float64 `json:"running_seconds"`
	// StartedTasks is what the simulated drivers started.
	StartedTasks int64 `json:"started_tasks"`
	// LeaderCPUSeconds is the leader's CPU time from register to running;
	// FollowersCPUSeconds the other servers' together, SimCPUSeconds the
	// simulator's (the nodes'): what the job cost the machine.
	LeaderCPUSeconds    float64 `json:"leader_cpu_seconds"`
	FollowersCPUSeconds float64 `json:"followers_cpu_seconds"`
	SimCPUSeconds       float64 `json:"sim_cpu_seconds"`
	// UpdateCalls is how many ClientAllocs.Update calls the nodes made
	// from register to running (each a batch of one node's updates).
	UpdateCalls int64 `json:"update_calls"`
	// AllocUpdates is how many alloc updates those calls carried, in all
	// and by client status (updates.go).
	AllocUpdates         int64            `json:"alloc_updates"`
	AllocUpdatesByStatus map[string]int64 `json:"alloc_updates_by_status,omitempty"`
	// RaftEntries is how far the raft log of the server the API asks
	// moved from register to running: every command of the job (its
	// register, plans, the nodes' updates, heartbeats' status changes).
	RaftEntries uint64 `json:"raft_entries"`
	// ProcessCPUSeconds is the job's CPU time by process: each server
	// (the leader marked), the simulator and each node process.
	ProcessCPUSeconds map[string]float64 `json:"process_cpu_seconds,omitempty"`
}

// startSim starts the servers (unless cfg.addrs) and waits for a leader.
func startSim(ctx context.Context, cfg simConfig) (_ *sim, err error) {
	if cfg.logger == nil {
		cfg.logger = hclog.NewNullLogger()
	}
	s := &sim{cfg: cfg, calls: newCallCounter(cfg.logger), pki: cfg.tlsFiles, phases: newPhaseLog(),
		report: &report{Nodes: cfg.nodes, TLS: cfg.tls || cfg.tlsFiles != nil, CSI: cfg.csi}}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	addrs, httpAddr := cfg.addrs, cfg.httpAddr
	if len(addrs) == 0 {
		if cfg.tls {
			if s.pki, err = newPKI(cfg.dir); err != nil {
				return nil, err
			}
		}
		s.servers, err = startServers(cfg.dir, serverOptions{bin: cfg.bin, n: cfg.servers, maxAllocs: cfg.jobAllocs, pki: s.pki,
			heartbeatTTL: cfg.heartbeatTTL})
		if err != nil {
			return nil, err
		}
		for _, sv := range s.servers {
			addrs = append(addrs, sv.rpc)
		}
		httpAddr = s.servers[0].http
	}
	s.cfg.addrs = addrs
	s.report.Servers = len(addrs)
	if s.api, err = apiClient(httpAddr, s.pki); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if _, err := waitLeader(wctx, s.api); err != nil {
		return nil, s.withLogs(err)
	}
	return s, nil
}

// withLogs adds where the servers' logs are to an error.
func (s *sim) withLogs(err error) error {
	var logs []string
	for _, sv := range s.servers {
		logs = append(logs, sv.logPath)
	}
	if len(logs) == 0 {
		return err
	}
	return fmt.Errorf("%w (server logs: %s)", err, strings.Join(logs, ", "))
}

// leader returns the server process that leads now; nil when the servers
// are not the simulator's or none leads.
func (s *sim) leader(ctx context.Context) (*server, error) {
	addr, err := waitLeader(ctx, s.api)
	if err != nil {
		return nil, err
	}
	for _, sv := range s.servers {
		if sv.rpc == addr {
			return sv, nil
		}
	}
	return nil, nil
}

// startWidth is how many nodes start at a time (all processes together).
const startWidth = 32

// startNodes starts every simulated node and waits until the servers list
// them all ready; it measures the simulator's memory per node.
func (s *sim) startNodes(ctx context.Context) error {
	if s.cfg.procs > 1 {
		return s.startNodesSplit(ctx)
	}
	before := simMemory()
	var nodeTLS *tlsconf.Store
	if s.pki != nil {
		var err error
		nodeTLS, err = tlsconf.New(tlsconf.Options{CAFile: s.pki.ca, CertFile: s.pki.clientCert, KeyFile: s.pki.clientKey,
			VerifyServerHostname: true, Role: tlsconf.RoleClient})
		if err != nil {
			return err
		}
	}
	o := nodeOptions{servers: s.cfg.addrs, tls: nodeTLS, csi: s.cfg.csi, zones: s.cfg.zones, logger: s.cfg.logger,
		dialOptions: append(s.calls.dialOptions(), grpc.WithChainUnaryInterceptor(s.phases.interceptor())), phases: s.phases}
	start := time.Now()
	nodesDir := s.cfg.nodesDir
	if nodesDir == "" {
		nodesDir = s.cfg.dir + "/nodes"
	}
	// Started 32 at a time: each node's first start writes its ID with an
	// fsync (host/client's node-id file), which on a busy disk would
	// otherwise pace the start, one node at a time.
	nodes := make([]*simNode, s.cfg.nodes)
	err := parallel(ctx, s.cfg.nodes, startWidth, func(_ context.Context, i int) (err error) {
		nodes[i], err = startNode(nodesDir, i, o)
		return err
	})
	for _, n := range nodes {
		if n != nil {
			s.nodes = append(s.nodes, n)
		}
	}
	if err != nil {
		return err
	}
	if err := s.waitNodesReady(ctx, s.cfg.nodes); err != nil {
		return err
	}
	s.report.ReadySeconds = time.Since(start).Seconds()
	after := simMemory()
	s.report.SimHeapPerNode = (after.heap - before.heap) / int64(s.cfg.nodes)
	s.report.SimRSSPerNode = (after.rss - before.rss) / int64(s.cfg.nodes)
	return nil
}

// waitNodesReady waits until the servers list want nodes ready (with the
// CSI plugin healthy on each, when the nodes run it), by blocking queries
// on the node list.
func (s *sim) waitNodesReady(ctx context.Context, want int) error {
	var index uint64
	var last string
	for {
		ready, healthyCSI, meta, err := s.countNodes(ctx, index)
		if err == nil {
			if ready >= want && (!s.cfg.csi || healthyCSI >= want) {
				return nil
			}
			last = fmt.Sprintf("%d of %d nodes ready, %d with the CSI plugin healthy", ready, want, healthyCSI)
			index = meta
		} else {
			last = err.Error()
			index = 0
		}
		if ctx.Err() != nil {
			return s.withLogs(fmt.Errorf("waiting for the nodes: %s: %w", last, ctx.Err()))
		}
	}
}

// countNodes lists every node (paged) once the node list passes index,
// counting the ready ones and those whose fake CSI plugin is healthy.
func (s *sim) countNodes(ctx context.Context, index uint64) (ready, csiHealthy int, last uint64, err error) {
	q := &api.QueryOptions{PerPage: 1000, WaitIndex: index, WaitTime: 5 * time.Second}
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		nodes, meta, err := s.api.Nodes(cctx, q)
		cancel()
		if err != nil {
			return 0, 0, 0, err
		}
		for _, n := range nodes {
			if n.GetStatus() == pb.NodeStatus_NODE_STATUS_READY {
				ready++
			}
			if p := n.GetCsiNodePlugins()[simPluginID]; p.GetHealthy() {
				csiHealthy++
			}
		}
		last = max(last, meta.LastIndex)
		if meta.NextToken == "" {
			return ready, csiHealthy, last, nil
		}
		q = &api.QueryOptions{PerPage: 1000, NextToken: meta.NextToken}
	}
}

// measure watches the servers (and the simulator) for d.
func (s *sim) measure(ctx context.Context, d time.Duration) (*window, error) {
	leader, err := s.leader(ctx)
	if err != nil {
		return nil, err
	}
	if leader == nil {
		return nil, errors.New("the servers are not the simulator's: their CPU cannot be read")
	}
	pids := map[*server]int{}
	before := map[*server]procStat{}
	for _, sv := range s.servers {
		pids[sv] = sv.cmd.Process.Pid
		if before[sv], err = readProcStat(pids[sv]); err != nil {
			return nil, err
		}
	}
	simBefore := s.simCPU()
	countsBefore, err := s.counts()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	wall := time.Since(start)
	countsAfter, err := s.counts()
	if err != nil {
		return nil, err
	}
	hbs := countsAfter.heartbeats() - countsBefore.heartbeats()
	w := &window{Seconds: wall.Seconds(), Heartbeats: float64(hbs) / wall.Seconds(),
		Calls: rates(countsBefore.calls, countsAfter.calls, wall.Seconds())}
	var followers []float64
	for _, sv := range s.servers {
		after, err := readProcStat(pids[sv])
		if err != nil {
			return nil, err
		}
		pct := 100 * float64(after.cpu-before[sv].cpu) / float64(wall)
		if sv == leader {
			w.LeaderCPU, w.LeaderRSS = pct, after.rss
			if hbs > 0 {
				w.HeartbeatCPU = float64((after.cpu - before[sv].cpu).Microseconds()) / float64(hbs)
			}
		} else {
			followers = append(followers, pct)
		}
	}
	for _, f := range followers {
		w.FollowerCPU += f / float64(len(followers))
	}
	w.SimCPU = 100 * float64(s.simCPU()-simBefore) / float64(wall)
	return w, nil
}

// stop ends the nodes, then the servers the simulator started.
func (s *sim) stop() {
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.c.Shutdown()
		}()
	}
	wg.Wait()
	s.nodes = nil
	s.stopNodeProcs()
	for _, sv := range s.servers {
		sv.stop()
	}
}

// memory is the simulator's Go heap and stacks in use and its resident set.
type memory struct{ heap, rss int64 }

func simMemory() memory {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := memory{heap: int64(ms.HeapInuse + ms.StackInuse)}
	if ps, err := readProcStat(os.Getpid()); err == nil {
		m.rss = ps.rss
	}
	return m
}
