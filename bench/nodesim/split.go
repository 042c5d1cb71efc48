package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"berth.dev/berth/rpc/pb"
)

// The nodes split over processes. Every simulated node holds a connection
// to each server it has talked to (host/client's pool: one per address),
// so at 10,000 nodes and 3 servers one process may need 30,000 open files,
// past a limit of 20,000 that cannot be raised. With -procs N (or, by
// default, when nodes × servers plus a reserve would pass the open-files
// limit) the simulator re-executes its own binary N times (childEnv), each
// a node process with a share of the nodes and its own limit (child.go),
// and holds no node itself: it starts the servers, runs the scenarios and
// adds up what the node processes count (their nodes' calls, the tasks
// started, the phases, memory and CPU).

// filesReserve is the open files a simulator process keeps for itself
// beside its nodes' connections (the Go runtime's, the API client's, the
// servers' log files, a node's files while it starts): a quarter of the
// limit, at most filesReserve.
const filesReserve = 1000

// procsFor is how many node processes n nodes against servers servers
// need, under an open-files limit of limit each: 1 when they fit in one
// process.
func procsFor(n, servers int, limit uint64) int {
	perNode := max(servers, 1)
	lim := int(min(limit, 1<<30))
	fit := max((lim-min(filesReserve, lim/4))/perNode, 1)
	return (n + fit - 1) / fit
}

// fileLimit is this process's open-files limit (soft), after
// raiseFileLimit.
func fileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return lim.Cur
}

// nodeProc is one node process.
type nodeProc struct {
	first, count int
	cmd          *exec.Cmd
	stdin        io.WriteCloser
	replies      *os.File
	enc          *json.Encoder
	dec          *json.Decoder
	exited       chan struct{}
	// mu serialises requests: one answer per request, in order.
	mu sync.Mutex
}

// startNodeProc starts a node process for cfg's nodes and waits until it
// started them all (not until the servers list them).
func startNodeProc(ctx context.Context, cfg childConfig) (*nodeProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &nodeProc{first: cfg.First, count: cfg.Count, exited: make(chan struct{})}
	p.cmd = exec.Command(exe)
	p.cmd.Env = append(os.Environ(), childEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
	// A node process whose parent dies (kill -9) goes with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	replies, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p.cmd.ExtraFiles = []*os.File{w} // replyFD in the child
	err = p.cmd.Start()
	w.Close()
	if err != nil {
		replies.Close()
		return nil, fmt.Errorf("starting a node process: %w", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	// The parent's end of the answers; closed once the process is gone.
	p.replies = replies
	p.enc, p.dec = json.NewEncoder(p.stdin), json.NewDecoder(replies)
	// Until its nodes started, a cancelled run ends it.
	started := make(chan struct{})
	defer close(started)
	go func() {
		select {
		case <-ctx.Done():
			p.kill()
		case <-started:
		}
	}()
	if err := p.enc.Encode(cfg); err != nil {
		p.kill()
		p.replies.Close()
		return nil, fmt.Errorf("node process %s: %w", p.name(), err)
	}
	var rep childReply
	if err := p.dec.Decode(&rep); err != nil || rep.Error != "" {
		p.kill()
		p.replies.Close()
		if err == nil {
			err = errors.New(rep.Error)
		}
		return nil, fmt.Errorf("node process %s starting its nodes: %w", p.name(), errors.Join(err, ctx.Err()))
	}
	return p, nil
}

// name is the nodes the process holds, for errors.
func (p *nodeProc) name() string {
	return fmt.Sprintf("sim-%05d…sim-%05d", p.first, p.first+p.count-1)
}

// call sends one request and reads its answer.
func (p *nodeProc) call(op string) (*childReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.enc.Encode(childRequest{Op: op}); err != nil {
		return nil, fmt.Errorf("node process %s, %s: %w", p.name(), op, err)
	}
	var rep childReply
	if err := p.dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("node process %s, %s: %w", p.name(), op, err)
	}
	if rep.Error != "" {
		return nil, fmt.Errorf("node process %s, %s: %s", p.name(), op, rep.Error)
	}
	return &rep, nil
}

// stop asks the process to end its nodes and waits for it to exit,
// killing it after 30 s.
func (p *nodeProc) stop() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.call(opStop)
		p.stdin.Close()
	}()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.kill()
	}
	p.stdin.Close()
	<-done
	p.replies.Close()
}

func (p *nodeProc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.exited
}

// startNodeProcs starts cfg.procs node processes with the nodes shared
// out evenly, all at once; on an error it stops those that started.
func (s *sim) startNodeProcs(ctx context.Context) error {
	base := childConfig{Servers: s.cfg.addrs, NodesDir: s.cfg.nodesDir, CSI: s.cfg.csi, Zones: s.cfg.zones,
		LogLevel: s.cfg.logLevel, GCPercent: s.cfg.gcPercent}
	if base.NodesDir == "" {
		base.NodesDir = s.cfg.dir + "/nodes"
	}
	if s.pki != nil {
		base.CAFile, base.CertFile, base.KeyFile = s.pki.ca, s.pki.clientCert, s.pki.clientKey
	}
	procs := make([]*nodeProc, s.cfg.procs)
	err := parallel(ctx, s.cfg.procs, s.cfg.procs, func(ctx context.Context, i int) (err error) {
		c := base
		c.First = i * s.cfg.nodes / s.cfg.procs
		c.Count = (i+1)*s.cfg.nodes/s.cfg.procs - c.First
		c.StartWidth = (startWidth + s.cfg.procs - 1) / s.cfg.procs
		procs[i], err = startNodeProc(ctx, c)
		return err
	})
	s.procsMu.Lock()
	defer s.procsMu.Unlock()
	for _, p := range procs {
		if p != nil {
			s.procs = append(s.procs, p)
		}
	}
	return err
}

// nodeProcsMemory is the node processes' memory growth since before their
// nodes started, added up.
func (s *sim) nodeProcsMemory() (memory, error) {
	var m memory
	for _, p := range s.procs {
		r, err := p.call(opMemory)
		if err != nil {
			return m, err
		}
		m.heap += r.Heap
		m.rss += r.RSS
	}
	return m, nil
}

// nodeCounts is what the nodes did so far, wherever they run.
type nodeCounts struct {
	calls           map[string]int64
	failed, slowest int64
	started         int64
}

func (c nodeCounts) heartbeats() int64 { return c.calls[pb.Nodes_Heartbeat_FullMethodName] }

// counts adds up the nodes' counts: this process's and every node
// process's.
func (s *sim) counts() (nodeCounts, error) {
	c := nodeCounts{calls: s.calls.snapshot(), failed: s.calls.failed.Load(), slowest: s.calls.slowest.Load(),
		started: s.startedTasks()}
	for _, p := range s.procs {
		r, err := p.call(opStats)
		if err != nil {
			return c, err
		}
		for m, n := range r.Calls {
			c.calls[m] += n
		}
		c.failed += r.Failed
		c.slowest = max(c.slowest, r.Slowest)
		c.started += r.Started
	}
	return c, nil
}

// simCPU is the simulator's CPU time so far: this process's and its node
// processes'.
func (s *sim) simCPU() time.Duration {
	var cpu time.Duration
	if ps, err := readProcStat(os.Getpid()); err == nil {
		cpu = ps.cpu
	}
	for _, p := range s.procs {
		if ps, err := readProcStat(p.cmd.Process.Pid); err == nil {
			cpu += ps.cpu
		}
	}
	return cpu
}

// startPhases starts recording the volume scenario's phases, here and in
// every node process.
func (s *sim) startPhases() error {
	s.phases.start()
	for _, p := range s.procs {
		if _, err := p.call(opPhasesStart); err != nil {
			return err
		}
	}
	return nil
}

// gatherPhases adds the node processes' phase records to this process's.
func (s *sim) gatherPhases() error {
	for _, p := range s.procs {
		r, err := p.call(opPhases)
		if err != nil {
			return err
		}
		s.phases.merge(r.Phases)
	}
	return nil
}

// stopNodeProcs stops every node process, all at once.
func (s *sim) stopNodeProcs() {
	var wg sync.WaitGroup
	for _, p := range s.procs {
		wg.Go(p.stop)
	}
	wg.Wait()
	s.procsMu.Lock()
	s.procs = nil
	s.procsMu.Unlock()
}

// filePeaks follows the open files of the servers and the simulator's
// processes (this one and its node processes), keeping the most seen.
type filePeaks struct {
	mu      sync.Mutex
	servers int // the most any one server held
	sim     int // the most any one simulator process held
	stop    chan struct{}
	done    chan struct{}
}

// filesSampleEvery is how often the open files are counted: a node's
// connections live as long as it does, so the counts move slowly, and a
// count reads /proc/<pid>/fd, thousands of entries a process at 10,000
// nodes, CPU the run would otherwise charge to the simulator.
const filesSampleEvery = 5 * time.Second

// watchFiles samples every filesSampleEvery until stopped.
func (s *sim) watchFiles() *filePeaks {
	f := &filePeaks{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		t := time.NewTicker(filesSampleEvery)
		defer t.Stop()
		for {
			s.sampleFiles(f)
			select {
			case <-f.stop:
				s.sampleFiles(f)
				return
			case <-t.C:
			}
		}
	}()
	return f
}

func (s *sim) sampleFiles(f *filePeaks) {
	var srv, sim int
	for _, sv := range s.servers {
		if sv.alive() {
			srv = max(srv, openFiles(sv.cmd.Process.Pid))
		}
	}
	sim = openFiles(os.Getpid())
	s.procsMu.Lock()
	for _, p := range s.procs {
		sim = max(sim, openFiles(p.cmd.Process.Pid))
	}
	s.procsMu.Unlock()
	f.mu.Lock()
	f.servers, f.sim = max(f.servers, srv), max(f.sim, sim)
	f.mu.Unlock()
}

// end stops the sampling and returns the peaks.
func (f *filePeaks) end() (servers, sim int) {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers, f.sim
}

// openFiles is how many files process pid holds open (0 when it cannot
// be read).
func openFiles(pid int) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// procLimit is the open-files limit (soft) of process pid, from
// /proc/<pid>/limits (0 when it cannot be read).
func procLimit(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) >= 1 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// startNodesSplit is startNodes with the nodes in node processes: it
// starts them, waits until the servers list every node ready, and
// measures the node processes' memory per node.
func (s *sim) startNodesSplit(ctx context.Context) error {
	start := time.Now()
	if err := s.startNodeProcs(ctx); err != nil {
		return err
	}
	if err := s.waitNodesReady(ctx, s.cfg.nodes); err != nil {
		return err
	}
	s.report.ReadySeconds = time.Since(start).Seconds()
	m, err := s.nodeProcsMemory()
	if err != nil {
		return err
	}
	s.report.SimHeapPerNode = m.heap / int64(s.cfg.nodes)
	s.report.SimRSSPerNode = m.rss / int64(s.cfg.nodes)
	return nil
}

// endFiles ends the open-files sampling (once) and records the peaks and
// limits in the report.
func (s *sim) endFiles(f *filePeaks) {
	if s.report.Files != nil {
		return
	}
	fr := &filesRun{SimLimit: procLimit(os.Getpid())}
	fr.ServerPeak, fr.SimPeak = f.end()
	for _, sv := range s.servers {
		if sv.alive() {
			fr.ServerLimit = max(fr.ServerLimit, procLimit(sv.cmd.Process.Pid))
		}
	}
	s.procsMu.Lock()
	for _, p := range s.procs {
		fr.SimLimit = min(fr.SimLimit, procLimit(p.cmd.Process.Pid))
	}
	s.procsMu.Unlock()
	s.report.Files = fr
}

// cpuByProcess is the CPU time so far of every live process of the run,
// by name: each server (the leader marked), this simulator process and
// each node process (by its nodes).
func (s *sim) cpuByProcess(leader *server) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, sv := range s.servers {
		if !sv.alive() {
			continue
		}
		name := "server " + sv.name
		if sv == leader {
			name += " (leader)"
		}
		if ps, err := readProcStat(sv.cmd.Process.Pid); err == nil {
			out[name] = ps.cpu
		}
	}
	if ps, err := readProcStat(os.Getpid()); err == nil {
		out["simulator"] = ps.cpu
	}
	s.procsMu.Lock()
	defer s.procsMu.Unlock()
	for _, p := range s.procs {
		if ps, err := readProcStat(p.cmd.Process.Pid); err == nil {
			out["nodes "+p.name()] = ps.cpu
		}
	}
	return out
}

// cpuSince is each process's CPU seconds between two cpuByProcess reads
// (processes in both).
func cpuSince(before, after map[string]time.Duration) map[string]float64 {
	out := map[string]float64{}
	for name, a := range after {
		if b, ok := before[name]; ok {
			out[name] = (a - b).Seconds()
		}
	}
	return out
}

// printProcessCPU prints a job's CPU by process on one line.
func printProcessCPU(w io.Writer, byProc map[string]float64) {
	if len(byProc) == 0 {
		return
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(byProc)) {
		parts = append(parts, fmt.Sprintf("%s %.2f s", name, byProc[name]))
	}
	fmt.Fprintf(w, "CPU by process: %s\n", strings.Join(parts, ", "))
}
