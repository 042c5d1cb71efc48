package main

// The secure section: what TLS and ACL cost (issue 21). Two agents of the
// berth binary run side by side, each one server (bootstrap_expect 1) and
// one client with raw_exec, raft and the state DB on disk as in
// production; they differ only in that the second has
//
//	tls { rpc http verify_server_hostname verify_https_client } (a CA and
//	    a server certificate made by internal/tlsconf, as `berth tls`
//	    makes them; the bench's API client presents a cli certificate)
//	acl { enabled = true } (bootstrapped; the measured runs use a token
//	    of a policy granting only submit-job, read-job, csi-mount-volume
//	    and csi-read-volume, so every request resolves a token and checks
//	    a capability)
//
// Measured:
//   - the csiflow path (job run → task running with the volume published,
//     job stop → claim freed) on both agents, one run on each in turn,
//     ABBA, the same jobs, plugin and volume as the csiflow section;
//   - raft apply throughput and p50 latency of a 3-server cluster with
//     berth's FSM over the TLS stream layer against raft's plain TCP
//     transport (the raft-tls section's machinery, ABBA round by round).
//     ACL is not on raft's path: it decides before anything is proposed.
//
// Target: medians within 1.10× of the plain ones, throughput ≥ 0.85×.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

const (
	secureLatencyTarget    = 1.10
	secureThroughputTarget = 0.85
	// secureRunnerPolicy is the measured runs' token's only policy.
	secureRunnerPolicy = `job {
  capabilities = ["submit-job", "read-job", "list-jobs"]
}
volume {
  capabilities = ["csi-mount-volume", "csi-read-volume"]
}
`
)

// secureArm is one agent of the comparison and the client that drives it.
type secureArm struct {
	name  string
	agent *devAgent
	c     *api.Client
	// mgmt is the management token of the secure agent (its stop uses it).
	mgmt string
	runs []csiFlowRun
}

func benchSecure(opts options) error {
	plan := jobRunPlan{warmup: 3, runs: 20}
	if opts.quick {
		plan = jobRunPlan{warmup: 1, runs: 3}
	}
	bin, err := berthBinary()
	if err != nil {
		return err
	}
	arms, err := measureSecureCSIFlow(bin, plan)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "secure: raft over TLS against plain TCP")
	raftM, err := measureRaftTLS(opts)
	if err != nil {
		return err
	}
	return printSecure(os.Stdout, arms, plan, raftM, opts.quick)
}

// measureSecureCSIFlow starts the plain and the secure agent, sets both up
// and measures plan's csiflow runs on each in turn, ABBA.
func measureSecureCSIFlow(bin string, plan jobRunPlan) (_ []*secureArm, err error) {
	plain, err := startSecureArm(bin, "plain", false)
	if err != nil {
		return nil, err
	}
	defer plain.stop()
	secure, err := startSecureArm(bin, "tls+acl", true)
	if err != nil {
		return nil, err
	}
	defer secure.stop()
	arms := []*secureArm{plain, secure}
	for i := range plan.warmup + plan.runs {
		order := slices.Clone(arms)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, a := range order {
			r, err := oneCSIFlowRun(a.c, fmt.Sprintf("bench-csi-%03d", i), csiFlowRawExec)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w (agent log: %s)", a.name, i, err, a.agent.logPath)
			}
			if i >= plan.warmup {
				a.runs = append(a.runs, r)
			}
		}
	}
	return arms, nil
}

// startSecureArm starts an agent (server and client in one process, its
// data on disk), with TLS and ACL when secure, waits for its node, runs
// the hostpath plugin's job and creates the volume (with the management
// token) and returns it with a client holding the runner's token.
func startSecureArm(bin, name string, secure bool) (_ *secureArm, err error) {
	dir, err := os.MkdirTemp("", "berth-bench-sec-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	var ports [3]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	// The data dir is kept short: plugin sockets under it have a 107-byte
	// limit.
	cfg := fmt.Sprintf(`name      = %q
data_dir  = %q
bind_addr = "127.0.0.1"
ports {
  http = %d
  rpc  = %d
  raft = %d
}
server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled = true
}
plugin "raw_exec" {
  config { enabled = true }
}
`, "bench-"+strings.ReplaceAll(name, "+", "-"), filepath.Join(dir, "d"), ports[0], ports[1], ports[2])
	scheme := "http"
	var tlsCfg api.TLSConfig
	if secure {
		tlsCfg, err = benchPKI(dir)
		if err != nil {
			return nil, err
		}
		scheme = "https"
		cfg += fmt.Sprintf(`tls {
  ca_file                = %q
  cert_file              = %q
  key_file               = %q
  rpc                    = true
  http                   = true
  verify_server_hostname = true
  verify_https_client    = true
}
acl {
  enabled = true
}
`, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
	}
	cfgPath := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return nil, err
	}
	a := &secureArm{name: name, agent: &devAgent{cmd: cmd, http: fmt.Sprintf("127.0.0.1:%d", ports[0]), dir: dir, logPath: logPath}}
	defer func() {
		if err != nil {
			a.stop()
			err = fmt.Errorf("%s: %w (agent log: %s)", name, err, logPath)
		}
	}()
	if a.c, err = api.NewClientTLS(scheme+"://"+a.agent.http, tlsCfg); err != nil {
		return nil, err
	}
	// Start-up only, not a measured path: poll until the agent answers.
	deadline := time.Now().Add(60 * time.Second)
	var mgmt string
	for secure && mgmt == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		boot, berr := a.c.ACL().Bootstrap(ctx)
		cancel()
		if berr == nil {
			mgmt = boot.GetSecretId()
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("ACL bootstrap: %w", berr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.c.SetToken(mgmt)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		nodes, _, nerr := a.c.Nodes(ctx, nil)
		cancel()
		if nerr == nil && len(nodes) == 1 && nodes[0].GetStatus() == pb.NodeStatus_NODE_STATUS_READY &&
			nodes[0].GetDrivers()["raw_exec"].GetHealthy() {
			break
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(errors.New("the node did not become ready with raw_exec in 60s"), nerr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := setUpCSIFlow(a.c, bin, dir); err != nil {
		return nil, err
	}
	if secure {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := a.c.ACL().PolicyApply(ctx, "bench-runner", "the secure bench's runs", secureRunnerPolicy); err != nil {
			return nil, err
		}
		tok, err := a.c.ACL().TokenCreate(ctx, &pb.ACLTokenCreateRequest{Name: "bench-runner", Policies: []string{"bench-runner"}})
		if err != nil {
			return nil, err
		}
		a.c.SetToken(tok.GetSecretId())
		a.mgmt = mgmt
	}
	return a, nil
}

// benchPKI writes a CA, a server certificate for the agent and a cli one
// for the bench's client to dir.
func benchPKI(dir string) (api.TLSConfig, error) {
	ca, err := tlsconf.NewCA(tlsconf.CAOptions{})
	if err != nil {
		return api.TLSConfig{}, err
	}
	files := map[string][]byte{"ca.pem": ca.Cert}
	for role, prefix := range map[tlsconf.Role]string{tlsconf.RoleServer: "server", tlsconf.RoleCLI: "cli"} {
		cert, err := tlsconf.NewCert(ca, tlsconf.CertOptions{Role: role})
		if err != nil {
			return api.TLSConfig{}, err
		}
		files[prefix+".pem"], files[prefix+"-key.pem"] = cert.Cert, cert.Key
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return api.TLSConfig{}, err
		}
	}
	return api.TLSConfig{CACert: filepath.Join(dir, "ca.pem"), ClientCert: filepath.Join(dir, "cli.pem"), ClientKey: filepath.Join(dir, "cli-key.pem")}, nil
}

// stop stops the plugin's job and waits (bounded) for its alloc to stop:
// the tasks of an agent that is not a dev agent outlive it. Then the agent.
func (a *secureArm) stop() {
	if a.c != nil {
		if a.mgmt != "" {
			a.c.SetToken(a.mgmt)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := a.c.Jobs().Deregister(ctx, "bench-hostpath", true); err == nil {
			for ctx.Err() == nil {
				allocs, _, err := a.c.Jobs().Allocations(ctx, "bench-hostpath", nil)
				if err != nil || !slices.ContainsFunc(allocs, func(al *pb.Allocation) bool {
					s := al.GetClientStatus()
					return s == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING || s == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING
				}) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	a.agent.stop()
}

// printSecure writes the table: each measure's plain and secure medians,
// their ratio and the verdict.
func printSecure(w io.Writer, arms []*secureArm, plan jobRunPlan, raftM *raftTLSMeasure, quick bool) error {
	plain, secure := arms[0], arms[1]
	median := func(runs []csiFlowRun, step string) time.Duration {
		var ds []time.Duration
		for _, r := range runs {
			if d, ok := r[step]; ok {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	verdict := func(ok bool) string {
		if quick {
			return "(quick)"
		}
		if ok {
			return "meets"
		}
		return "MISSES"
	}
	var b strings.Builder
	b.WriteString("| measure | plain | TLS + ACL | ratio | target | verdict |\n|---|--:|--:|--:|--:|---|\n")
	for _, m := range []struct{ name, step string }{{"csiflow job run → running (median)", "running"}, {"csiflow job stop → claim freed (median)", "claim freed"}} {
		p, s := median(plain.runs, m.step), median(secure.runs, m.step)
		if p == 0 || s == 0 {
			return fmt.Errorf("secure: no %q measured", m.step)
		}
		r := float64(s) / float64(p)
		fmt.Fprintf(&b, "| %s | %s | %s | %.3f× | ≤ %.2f× | %s |\n", m.name, fmtMS(p), fmtMS(s), r, secureLatencyTarget, verdict(r <= secureLatencyTarget))
	}
	for _, procs := range raftProposerCounts {
		r := raftM.row(procs)
		fmt.Fprintf(&b, "| raft throughput, %d proposers (ops/s) | %.0f | %.0f | %.3f× | ≥ %.2f× | %s |\n", procs, r.plainOps, r.tlsOps, r.thrRatio,
			secureThroughputTarget, verdict(r.thrRatio >= secureThroughputTarget))
		fmt.Fprintf(&b, "| raft apply p50, %d proposers | %s | %s | %.3f× | ≤ %.2f× | %s |\n", procs, r.plainP50.Round(time.Microsecond),
			r.tlsP50.Round(time.Microsecond), r.latRatio, secureLatencyTarget, verdict(r.latRatio <= secureLatencyTarget))
		fmt.Fprintf(&b, "| raft noise floor, %d proposers: a second plain cluster / plain | throughput | p50 | %.3f×, %.3f× | — | control |\n",
			procs, r.ctlThrRatio, r.ctlLatRatio)
	}
	mode := ""
	if quick {
		mode = " (quick mode: too few runs to judge)"
	}
	fmt.Fprintf(&b, "\ncsiflow: %d runs on each agent after %d warm-up runs%s, one at a time, alternating ABBA; each agent is a server and a client "+
		"in one process with raft and the state DB on disk; the TLS + ACL one verifies client certificates on RPC and HTTPS and "+
		"the runs use a token of a policy with submit-job, read-job, list-jobs, csi-mount-volume and csi-read-volume. "+
		"The ratios are of the medians.\n", plan.runs, plan.warmup, mode)
	fmt.Fprintf(&b, "raft: 3 servers, berth FSM, %s payload (%d B), %d rounds of %s, order rotated each round, TLS stream layer with verify_server_hostname "+
		"against plain TCP and a second plain cluster as the control (its ratios are this machine's noise); ratios are the medians "+
		"of the per-round ratios. ACL is not on raft's path.\n",
		raftM.spec.name, raftM.p.size(), raftM.plan.rounds, raftM.plan.window)
	_, err := io.WriteString(w, b.String())
	return err
}
