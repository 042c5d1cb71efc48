package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"berth.dev/berth/internal/tlsconf"
)

// A node process: the simulator re-executed with childEnv set holds a
// share of the nodes (split.go decides how many processes, and starts
// them). It reads its childConfig from stdin as one JSON value, starts its
// nodes, answers one childReply (empty once they all started), then
// answers one request after another until told to stop or stdin ends (the
// parent gone): every node is then shut down and the process exits. It
// answers on file descriptor 3 (replyFD), not stdout, so nothing a
// library prints can break the answers; its stdout and stderr go to the
// simulator's stderr.
//
// A node process counts its nodes' calls, the tasks their drivers started
// and the volume scenario's phases itself; the parent adds them up.

// childEnv, set to "1" in its environment, makes the simulator's binary a
// node process.
const childEnv = "BERTH_NODESIM_CHILD"

// childConfig is what a node process is told to run.
type childConfig struct {
	// First is the index of its first node (the node's name and data dir
	// follow it), Count how many nodes it runs.
	First int `json:"first"`
	Count int `json:"count"`
	// Servers are the servers' RPC addresses.
	Servers []string `json:"servers"`
	// NodesDir holds every node's data dir.
	NodesDir string `json:"nodes_dir"`
	CSI      bool   `json:"csi"`
	Zones    int    `json:"zones"`
	LogLevel string `json:"log_level"`
	// CAFile, CertFile and KeyFile are the nodes' TLS files (none: plain).
	CAFile    string `json:"ca_file,omitempty"`
	CertFile  string `json:"cert_file,omitempty"`
	KeyFile   string `json:"key_file,omitempty"`
	GCPercent int    `json:"gc_percent"`
	// StartWidth is how many of its nodes it starts at a time: the
	// simulator's 32 shared out, so the servers see the same rate of
	// first registrations however many processes hold the nodes.
	StartWidth int `json:"start_width"`
}

// childRequest is one request to a node process.
type childRequest struct {
	Op string `json:"op"`
}

// The requests.
const (
	opStats       = "stats"        // its counts so far
	opMemory      = "memory"       // its memory growth since before its nodes (after a collection)
	opPhasesStart = "phases-start" // start recording the volume scenario's phases
	opPhases      = "phases"       // the phases recorded
	opStop        = "stop"         // shut the nodes down and exit
)

// childReply is a node process's answer; Error is set when it failed.
type childReply struct {
	Error string `json:"error,omitempty"`
	// Calls are its nodes' calls by method, Failed the heartbeats without
	// an answer, Slowest the slowest heartbeat (ns), Started the tasks its
	// drivers started (opStats).
	Calls   map[string]int64 `json:"calls,omitempty"`
	Failed  int64            `json:"failed,omitempty"`
	Slowest int64            `json:"slowest,omitempty"`
	Started int64            `json:"started,omitempty"`
	// Heap and RSS are its memory growth since before its nodes started
	// (opMemory).
	Heap int64 `json:"heap,omitempty"`
	RSS  int64 `json:"rss,omitempty"`
	// Phases are the phases recorded, per phase key → Unix nanoseconds
	// (opPhases).
	Phases []map[string]int64 `json:"phases,omitempty"`
}

// runChild is a node process's main.
func runChild(stdin io.Reader, stdout, stderr io.Writer) int {
	dec, enc := json.NewDecoder(stdin), json.NewEncoder(stdout)
	var cfg childConfig
	if err := dec.Decode(&cfg); err != nil {
		fmt.Fprintln(stderr, "nodesim node process: reading its config:", err)
		return 2
	}
	tuneGC(cfg.GCPercent)
	raiseFileLimit()
	logger := hclog.NewNullLogger()
	if lvl := hclog.LevelFromString(cfg.LogLevel); lvl != hclog.NoLevel && lvl != hclog.Off {
		logger = hclog.New(&hclog.LoggerOptions{Name: fmt.Sprintf("nodesim.%d", cfg.First), Level: lvl, Output: stderr})
	}
	h := &childHost{calls: newCallCounter(logger), phases: newPhaseLog()}
	defer h.shutdown()
	if err := h.start(cfg, logger); err != nil {
		_ = enc.Encode(childReply{Error: err.Error()})
		return 1
	}
	if err := enc.Encode(childReply{}); err != nil {
		return 1
	}
	for {
		var req childRequest
		if err := dec.Decode(&req); err != nil {
			// The parent is gone (or wrote nonsense): end the nodes.
			if !errors.Is(err, io.EOF) {
				fmt.Fprintln(stderr, "nodesim node process:", err)
			}
			return 0
		}
		rep := h.answer(req)
		if err := enc.Encode(rep); err != nil {
			return 1
		}
		if req.Op == opStop {
			return 0
		}
	}
}

// childHost is a node process's nodes and what it counts of them.
type childHost struct {
	calls  *callCounter
	phases *phaseLog
	nodes  []*simNode
	before memory
}

func (h *childHost) start(cfg childConfig, logger hclog.Logger) error {
	var nodeTLS *tlsconf.Store
	if cfg.CAFile != "" {
		var err error
		nodeTLS, err = tlsconf.New(tlsconf.Options{CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile,
			VerifyServerHostname: true, Role: tlsconf.RoleClient})
		if err != nil {
			return err
		}
	}
	o := nodeOptions{servers: cfg.Servers, tls: nodeTLS, csi: cfg.CSI, zones: cfg.Zones, logger: logger,
		dialOptions: append(h.calls.dialOptions(), grpc.WithChainUnaryInterceptor(h.phases.interceptor())), phases: h.phases}
	h.before = simMemory()
	nodes := make([]*simNode, cfg.Count)
	err := parallel(context.Background(), cfg.Count, max(cfg.StartWidth, 1), func(_ context.Context, i int) (err error) {
		nodes[i], err = startNode(cfg.NodesDir, cfg.First+i, o)
		return err
	})
	for _, n := range nodes {
		if n != nil {
			h.nodes = append(h.nodes, n)
		}
	}
	return err
}

func (h *childHost) answer(req childRequest) childReply {
	switch req.Op {
	case opStats:
		r := childReply{Calls: h.calls.snapshot(), Failed: h.calls.failed.Load(), Slowest: h.calls.slowest.Load()}
		for _, n := range h.nodes {
			r.Started += n.driver.started.Load()
		}
		return r
	case opMemory:
		m := simMemory()
		return childReply{Heap: m.heap - h.before.heap, RSS: m.rss - h.before.rss}
	case opPhasesStart:
		h.phases.start()
		return childReply{}
	case opPhases:
		return childReply{Phases: h.phases.export()}
	case opStop:
		h.shutdown()
		return childReply{}
	}
	return childReply{Error: fmt.Sprintf("unknown request %q", req.Op)}
}

// shutdown ends every node, all at once.
func (h *childHost) shutdown() {
	var wg sync.WaitGroup
	for _, n := range h.nodes {
		wg.Go(n.c.Shutdown)
	}
	wg.Wait()
	h.nodes = nil
}

// export returns what the log recorded: per phase, key → Unix nanoseconds.
func (l *phaseLog) export() []map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]map[string]int64, numPhases)
	for p, m := range l.times {
		out[p] = make(map[string]int64, len(m))
		for k, t := range m {
			out[p][k] = t.UnixNano()
		}
	}
	return out
}

// merge adds another log's records (export's form), keeping the earlier
// time where both have a key.
func (l *phaseLog) merge(x []map[string]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, m := range x {
		if p >= int(numPhases) {
			break
		}
		for k, ns := range m {
			t := time.Unix(0, ns)
			if old, ok := l.times[p][k]; !ok || t.Before(old) {
				l.times[p][k] = t
			}
		}
	}
}

// childMain runs the binary as a node process when childEnv says so, and
// reports whether it did (then the process must exit with code).
func childMain() (code int, ok bool) {
	if os.Getenv(childEnv) != "1" {
		return 0, false
	}
	replies := os.NewFile(replyFD, "nodesim-replies")
	defer replies.Close()
	return runChild(os.Stdin, replies, os.Stderr), true
}

// replyFD is the descriptor a node process answers on: the first of
// exec.Cmd.ExtraFiles.
const replyFD = 3
