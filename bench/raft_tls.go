package main

// The raft-tls section: what mutual TLS on raft's transport costs. A
// 3-server cluster runs berth's FSM applying the real NodeRegister payload
// over raft's plain TCP transport (the baseline) and over the TLS stream
// layer a server with tls.rpc runs (host/server NewTLSStreamLayer, with
// verify_server_hostname), interleaved round by round on fresh clusters
// (each round rotates the order), at 1 and 64 proposers. A third arm, a
// second plain cluster, is the control: its ratio to the first is the
// noise floor of this machine, against which TLS / plain is read (at one
// proposer each commit waits on three fsyncs, and the per-round ratios of
// two identical plain clusters spread as widely as TLS's). Reported: each
// side's median throughput and p50 latency and the medians of the
// per-round ratios TLS / plain and control / plain. Target: throughput ≥
// 0.85×, latency within 1.10× (issue 21).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"berth.dev/berth/host/server"
	"berth.dev/berth/internal/tlsconf"
)

type tlsArm struct {
	name string
	newT newTransport
}

func benchRaftTLS(opts options) error {
	m, err := measureRaftTLS(opts)
	if err != nil {
		return err
	}
	fmt.Printf("3 servers, berth FSM, %s payload (%d B), %d rounds of %s, order rotated each round\n\n", m.spec.name, m.p.size(), m.plan.rounds, m.plan.window)
	fmt.Printf("| proposers | plain ops/s | TLS ops/s | TLS/plain throughput | plain p50 | TLS p50 | TLS/plain p50 | control/plain throughput | control/plain p50 |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, procs := range raftProposerCounts {
		r := m.row(procs)
		fmt.Printf("| %d | %.0f | %.0f | %.2f× | %s | %s | %.2f× | %.2f× | %.2f× |\n", procs, r.plainOps, r.tlsOps, r.thrRatio,
			r.plainP50.Round(time.Microsecond), r.tlsP50.Round(time.Microsecond), r.latRatio, r.ctlThrRatio, r.ctlLatRatio)
	}
	return nil
}

// raftTLSMeasure is what measureRaftTLS measured: per arm ("plain",
// "tls", "control") and proposer count, one result per round.
type raftTLSMeasure struct {
	plan raftPlan
	spec payloadSpec
	p    *payloads
	runs map[string]map[int][]loadResult
}

// raftTLSRow is one proposer count's medians and the medians of the
// per-round ratios TLS / plain and control / plain.
type raftTLSRow struct {
	plainOps, tlsOps         float64
	thrRatio, latRatio       float64
	ctlThrRatio, ctlLatRatio float64
	plainP50, tlsP50         time.Duration
}

func (m *raftTLSMeasure) row(procs int) raftTLSRow {
	plain, tls := m.runs["plain"][procs], m.runs["tls"][procs]
	thr, lat := perRoundRatios(tls, plain)
	ctlThr, ctlLat := perRoundRatios(m.runs["control"][procs], plain)
	return raftTLSRow{
		plainOps: medianOf(plain, loadResult.opsPerSec), tlsOps: medianOf(tls, loadResult.opsPerSec),
		thrRatio: medianF(thr), latRatio: medianF(lat),
		ctlThrRatio: medianF(ctlThr), ctlLatRatio: medianF(ctlLat),
		plainP50: time.Duration(medianOf(plain, p50)), tlsP50: time.Duration(medianOf(tls, p50)),
	}
}

// perRoundRatios are, round by round, a's throughput and p50 over base's.
func perRoundRatios(a, base []loadResult) (thr, lat []float64) {
	for i := range min(len(a), len(base)) {
		thr = append(thr, a[i].opsPerSec()/base[i].opsPerSec())
		lat = append(lat, float64(a[i].percentile(0.5))/float64(base[i].percentile(0.5)))
	}
	return thr, lat
}

// measureRaftTLS runs the plain and the TLS clusters, ABBA round by round.
func measureRaftTLS(opts options) (_ *raftTLSMeasure, err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	plan := fullRaftPlan
	if opts.quick {
		plan = quickRaftPlan
	}
	dir, err := os.MkdirTemp("", "berth-bench-raft-tls-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	store, err := benchTLSStore(dir)
	if err != nil {
		return nil, err
	}
	spec, err := realPayload()
	if err != nil {
		return nil, err
	}
	p, err := newPayloads(spec)
	if err != nil {
		return nil, err
	}
	arms := []tlsArm{
		{"plain", tcpTransport},
		{"tls", func(logger hclog.Logger) (*raft.NetworkTransport, error) {
			layer, err := server.NewTLSStreamLayer("127.0.0.1:0", store)
			if err != nil {
				return nil, err
			}
			return raft.NewNetworkTransportWithLogger(layer, transportPool, transportTimeout, logger.Named("raft-net")), nil
		}},
		{"control", tcpTransport},
	}
	const servers = 3
	runs := map[string]map[int][]loadResult{"plain": {}, "tls": {}, "control": {}}
	for round := range plan.rounds {
		// Rotated: each arm runs first, second and last in turn.
		k := round % len(arms)
		order := slices.Concat(arms[k:], arms[:k])
		for _, arm := range order {
			fmt.Fprintf(os.Stderr, "raft-tls: round %d/%d, %s\n", round+1, plan.rounds, arm.name)
			res, err := runTLSArm(ctx, filepath.Join(dir, fmt.Sprintf("round%d-%s", round+1, arm.name)), servers, arm, plan, p)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round+1, arm.name, err)
			}
			for procs, r := range res {
				runs[arm.name][procs] = append(runs[arm.name][procs], r)
			}
		}
	}
	return &raftTLSMeasure{plan: plan, spec: spec, p: p, runs: runs}, nil
}

func p50(r loadResult) float64 { return float64(r.percentile(0.5)) }

func medianOf(rs []loadResult, f func(loadResult) float64) float64 {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	return medianF(vs)
}

func medianF(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// runTLSArm starts a fresh cluster on arm's transport and measures every
// proposer count, redoing the run when the leader lost its lease (the
// machine, not the transport).
func runTLSArm(ctx context.Context, dir string, servers int, arm tlsArm, plan raftPlan, p *payloads) (map[int]loadResult, error) {
	for attempt := 1; ; attempt++ {
		logs := &logBuffer{}
		logger := hclog.New(&hclog.LoggerOptions{Name: "bench-raft-tls", Level: hclog.Warn, Output: logs})
		res, err := runTLSCluster(ctx, fmt.Sprintf("%s-%d", dir, attempt), servers, arm, plan, p, logger)
		if err == nil {
			return res, nil
		}
		lost := errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrNotLeader)
		if !lost || attempt == leadershipAttempts || ctx.Err() != nil {
			os.Stderr.Write(logs.bytes())
			return nil, err
		}
	}
}

func runTLSCluster(ctx context.Context, dir string, servers int, arm tlsArm, plan raftPlan, p *payloads, logger hclog.Logger) (_ map[int]loadResult, err error) {
	c, err := startClusterWith(ctx, dir, servers, berthKind, logger, arm.newT)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := c.shutdown(); serr != nil {
			err = errors.Join(err, serr)
		}
		runtime.GC()
	}()
	out := map[int]loadResult{}
	for _, procs := range raftProposerCounts {
		if _, err := runLoad(ctx, c.leader, berthKind, p, procs, plan.warmup); err != nil {
			return nil, err
		}
		res, err := runLoad(ctx, c.leader, berthKind, p, procs, plan.window)
		if err != nil {
			return nil, err
		}
		out[procs] = res
	}
	return out, nil
}

// benchTLSStore makes a CA and a server certificate in dir and loads them
// as a server with verify_server_hostname would.
func benchTLSStore(dir string) (*tlsconf.Store, error) {
	ca, err := tlsconf.NewCA(tlsconf.CAOptions{})
	if err != nil {
		return nil, err
	}
	cert, err := tlsconf.NewCert(ca, tlsconf.CertOptions{Role: tlsconf.RoleServer})
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"ca.pem": ca.Cert, "server.pem": cert.Cert, "server-key.pem": cert.Key}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return tlsconf.New(tlsconf.Options{
		CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem"),
		VerifyServerHostname: true,
	})
}
