package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/rpc/api"
)

// server is one real `berth` server process the simulator started.
type server struct {
	name    string
	dir     string
	config  string
	rpc     string
	http    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// pki is the certificates of a TLS cluster: the servers', the simulated
// nodes' (one client certificate for all) and the API caller's.
type pki struct {
	dir                   string
	ca                    string
	serverCert, serverKey string
	clientCert, clientKey string
	cliCert, cliKey       string
}

// newPKI writes a CA and a server, a client and a cli certificate to dir.
func newPKI(dir string) (*pki, error) {
	ca, err := tlsconf.NewCA(tlsconf.CAOptions{})
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: filepath.Join(dir, "ca.pem")}
	if err := os.WriteFile(p.ca, ca.Cert, 0o600); err != nil {
		return nil, err
	}
	for _, r := range []struct {
		role      tlsconf.Role
		cert, key *string
	}{{tlsconf.RoleServer, &p.serverCert, &p.serverKey}, {tlsconf.RoleClient, &p.clientCert, &p.clientKey},
		{tlsconf.RoleCLI, &p.cliCert, &p.cliKey}} {
		c, err := tlsconf.NewCert(ca, tlsconf.CertOptions{Role: r.role})
		if err != nil {
			return nil, err
		}
		*r.cert, *r.key = filepath.Join(dir, string(r.role)+".pem"), filepath.Join(dir, string(r.role)+"-key.pem")
		if err := os.WriteFile(*r.cert, c.Cert, 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(*r.key, c.Key, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// serverOptions configure the server processes the simulator starts.
type serverOptions struct {
	bin string
	n   int
	// maxAllocs raises the job limits (job_max_count, job_max_allocs) to
	// hold the largest job a scenario runs.
	maxAllocs int
	pki       *pki
	// heartbeatTTL, when set, is the servers' heartbeat_ttl (their
	// default is 10 s).
	heartbeatTTL time.Duration
}

// startServers starts n server processes on loopback, data dirs under
// root, that form one cluster. Their RPC listeners take any number of
// connections from one IP (the simulated nodes all come from 127.0.0.1).
func startServers(root string, o serverOptions) ([]*server, error) {
	type portSet struct{ http, rpc, raft int }
	var ps []portSet
	var join []string
	for range o.n {
		p, err := freePorts(3)
		if err != nil {
			return nil, err
		}
		ps = append(ps, portSet{p[0], p[1], p[2]})
		join = append(join, strconv.Quote(fmt.Sprintf("127.0.0.1:%d", p[1])))
	}
	var out []*server
	for i, p := range ps {
		s := &server{name: fmt.Sprintf("s%d", i+1), dir: filepath.Join(root, fmt.Sprintf("s%d", i+1)),
			rpc: fmt.Sprintf("127.0.0.1:%d", p.rpc), http: fmt.Sprintf("127.0.0.1:%d", p.http)}
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return out, err
		}
		ttl := ""
		if o.heartbeatTTL > 0 {
			ttl = fmt.Sprintf("  heartbeat_ttl    = %q\n", o.heartbeatTTL.String())
		}
		cfg := fmt.Sprintf(`name      = %q
data_dir  = %q
bind_addr = "127.0.0.1"
log_level = "info"
ports {
  http = %d
  rpc  = %d
  raft = %d
}
limits {
  rpc_max_conns_per_client  = 0
  http_max_conns_per_client = 0
}
server {
  enabled          = true
  bootstrap_expect = %d
  retry_join       = [%s]
  retry_interval   = "1s"
  job_max_count    = %d
  job_max_allocs   = %d
%s}
`, s.name, filepath.Join(s.dir, "data"), p.http, p.rpc, p.raft, o.n, strings.Join(join, ", "), max(o.maxAllocs, 1000), max(o.maxAllocs, 5000), ttl)
		if o.pki != nil {
			cfg += fmt.Sprintf(`tls {
  ca_file                = %q
  cert_file              = %q
  key_file               = %q
  rpc                    = true
  http                   = true
  verify_server_hostname = true
}
`, o.pki.ca, o.pki.serverCert, o.pki.serverKey)
		}
		s.config = filepath.Join(s.dir, "agent.hcl")
		if err := os.WriteFile(s.config, []byte(cfg), 0o644); err != nil {
			return out, err
		}
		s.logPath = filepath.Join(s.dir, "agent.log")
		if err := s.start(o.bin); err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (s *server) start(bin string) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.cmd = exec.Command(bin, "run", "-config", s.config)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	err = s.cmd.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("starting server %s: %w", s.name, err)
	}
	s.exited = make(chan struct{})
	cmd, exited := s.cmd, s.exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return nil
}

// kill ends the process at once (SIGKILL), as a crash would.
func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// stop ends the process gracefully, killing it after 30s.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.kill()
	}
}

func (s *server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return s.cmd != nil
	}
}

// freePorts returns n free loopback TCP ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// apiClient is an HTTP API client of a server, over HTTPS with the cli
// certificate when the cluster runs TLS.
func apiClient(httpAddr string, p *pki) (*api.Client, error) {
	if p == nil {
		return api.NewClient("http://" + httpAddr)
	}
	return api.NewClientTLS("https://"+httpAddr, api.TLSConfig{CACert: p.ca, ClientCert: p.cliCert, ClientKey: p.cliKey})
}

// waitLeader waits until a server answers with a leader and returns the
// leader's RPC address.
func waitLeader(ctx context.Context, c *api.Client) (string, error) {
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l, err := c.Leader(cctx)
		cancel()
		if err == nil && l != "" {
			return l, nil
		}
		if err == nil {
			err = errors.New("no leader yet")
		}
		last = err
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for a leader: %w", errors.Join(ctx.Err(), last))
		case <-time.After(100 * time.Millisecond): // start-up only, not a measured path
		}
	}
}

// procStat is a process's CPU time and resident memory.
type procStat struct {
	cpu time.Duration // user + system
	rss int64         // bytes
}

// readProcStat reads /proc/<pid>/stat (utime, stime) and /proc/<pid>/status
// (VmRSS).
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name may hold spaces: fields start after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// Fields 14 and 15 of stat (utime, stime) are 11 and 12 here.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	ps := procStat{cpu: time.Duration(ut+st) * time.Second / ticksPerSecond}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStat{}, err
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fs := strings.Fields(rest)
			if len(fs) >= 1 {
				kb, err := strconv.ParseInt(fs[0], 10, 64)
				if err != nil {
					return procStat{}, fmt.Errorf("/proc/%d/status VmRSS: %w", pid, err)
				}
				ps.rss = kb * 1024
			}
		}
	}
	return ps, nil
}
