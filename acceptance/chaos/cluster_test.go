package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Every agent listens on the same ports in its own namespace.
const (
	portHTTP = 4646
	portRPC  = 4647
	portRaft = 4648
)

// agent is one berth process of the run, in its own network namespace.
type agent struct {
	name    string
	server  bool
	ns, ip  string
	dir     string
	config  string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool // SIGSTOPped by a fault
}

// cluster is the run's three servers and three clients.
type cluster struct {
	t       *testing.T
	lab     *netLab
	dir     string
	servers []*agent
	clients []*agent
	http    *http.Client
	// fullDisk is the client whose data dir is a small tmpfs.
	fullDisk *agent
}

func (c *cluster) all() []*agent { return append(append([]*agent(nil), c.servers...), c.clients...) }

func startCluster(t *testing.T, lab *netLab, dir string) *cluster {
	t.Helper()
	c := &cluster{t: t, lab: lab, dir: dir}
	c.http = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: lab.dialInHub, DisableKeepAlives: true}}
	var join []string
	for i := range 3 {
		name := fmt.Sprintf("s%d", i+1)
		ns, ip := lab.addNode(name, 10+i)
		c.servers = append(c.servers, &agent{name: name, server: true, ns: ns, ip: ip})
		join = append(join, fmt.Sprintf("%q", fmt.Sprintf("%s:%d", ip, portRPC)))
	}
	for i := range 3 {
		name := fmt.Sprintf("c%d", i+1)
		ns, ip := lab.addNode(name, 20+i)
		c.clients = append(c.clients, &agent{name: name, ns: ns, ip: ip})
	}
	c.fullDisk = c.clients[2]
	// Cleanups run last-registered first: the agents stop, then their
	// leftover tasks are killed, then mounts under the run are undone (the
	// namespaces go last, registered by newNetLab).
	t.Cleanup(func() { unmountUnder(t, dir) })
	t.Cleanup(func() { killLeftovers(t, dir) })
	for _, a := range c.all() {
		a.dir = filepath.Join(dir, a.name)
		a.logPath = filepath.Join(a.dir, "agent.log")
		body := fmt.Sprintf(`
server {
  enabled          = true
  bootstrap_expect = 3
  retry_join       = [%s]
  retry_interval   = "1s"
  heartbeat_ttl    = "2s"
  heartbeat_grace  = "3s"
}`, strings.Join(join, ", "))
		if !a.server {
			body = fmt.Sprintf(`
client {
  enabled = true
  servers = [%s]
}
plugin "raw_exec" {
  config { enabled = true }
}`, strings.Join(join, ", "))
		}
		if err := os.MkdirAll(filepath.Join(a.dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if a == c.fullDisk {
			mountTmpfs(t, filepath.Join(a.dir, "data"), "64m")
		}
		a.config = filepath.Join(a.dir, "agent.hcl")
		cfg := fmt.Sprintf(`
name      = %q
data_dir  = %q
bind_addr = %q
log_level = "debug"
ports {
  http = %d
  rpc  = %d
  raft = %d
}
%s
`, a.name, filepath.Join(a.dir, "data"), a.ip, portHTTP, portRPC, portRaft, body)
		if err := os.WriteFile(a.config, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		a.start(t)
		t.Cleanup(a.stop)
	}
	return c
}

func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mounting a tmpfs at %s: %v", dir, err)
	}
}

// start runs the agent in its namespace (nsenter enters the network
// namespace only and execs berth, so the PID is berth's).
func (a *agent) start(t *testing.T) {
	a.mu.Lock()
	defer a.mu.Unlock()
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net=/var/run/netns/"+a.ns, berthBin, "run", "-config", a.config)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %s: %v", a.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	a.cmd, a.exited, a.stopped = cmd, exited, false
}

func (a *agent) running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return false
	}
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to the agent's process, if it runs.
func (a *agent) signal(sig syscall.Signal) {
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	if sig == syscall.SIGSTOP {
		a.stopped = true
	} else if sig == syscall.SIGCONT {
		a.stopped = false
	}
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
	default:
		_ = cmd.Process.Signal(sig)
	}
}

// kill sends SIGKILL and waits for the process to end.
func (a *agent) kill() {
	a.signal(syscall.SIGKILL)
	a.mu.Lock()
	exited := a.exited
	a.mu.Unlock()
	if exited != nil {
		<-exited
	}
}

// stop ends the agent: SIGCONT (a fault may have stopped it), SIGTERM, and
// SIGKILL after 10s.
func (a *agent) stop() {
	if !a.running() {
		return
	}
	a.signal(syscall.SIGCONT)
	a.signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		a.kill()
	}
}

// url is the agent's API address, reached from the hub.
func (a *agent) url(path string) string {
	return fmt.Sprintf("http://%s:%d%s", a.ip, portHTTP, path)
}

// apiError is an API error reply.
type apiError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// do calls the agent's API; out (if not nil) gets the JSON answer. An
// answer that is not 200 is an *apiError.
func (c *cluster) do(ctx context.Context, a *agent, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.url(path), rd)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		e := &apiError{Status: resp.StatusCode}
		if json.Unmarshal(b, e) != nil {
			e.Message = string(b)
		}
		return e
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

func (c *cluster) get(a *agent, path string, out any) error {
	return c.do(context.Background(), a, "GET", path, nil, out)
}

// leader is the server the servers agree leads, or an error.
func (c *cluster) leader() (*agent, error) {
	var addr string
	for _, s := range c.servers {
		if !s.running() {
			continue
		}
		var l string
		if err := c.get(s, "/v1/status/leader", &l); err != nil {
			return nil, err
		}
		if l == "" || (addr != "" && l != addr) {
			return nil, fmt.Errorf("%s sees leader %q, another %q", s.name, l, addr)
		}
		addr = l
	}
	for _, s := range c.servers {
		if addr == fmt.Sprintf("%s:%d", s.ip, portRPC) {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no server at leader address %q", addr)
}

// api is a running server, for requests that any server answers.
func (c *cluster) api() *agent {
	for _, s := range c.servers {
		if s.running() && !s.isStopped() {
			return s
		}
	}
	return c.servers[0]
}

func (a *agent) isStopped() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopped
}

// cli runs a berth CLI command in the hub against server s.
func (c *cluster) cli(s *agent, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/var/run/netns/" + c.lab.hub, berthBin}, args...)...)
	cmd.Env = append(os.Environ(), "BERTH_ADDR="+s.url(""))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitFor polls cond every 100ms until it holds or timeout passes; it
// returns the last error.
func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type apiNode struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// nodeIDs maps client names to node IDs once all three are ready.
func (c *cluster) waitReady(t *testing.T) map[string]string {
	t.Helper()
	ids := map[string]string{}
	err := waitFor(90*time.Second, func() error {
		if _, err := c.leader(); err != nil {
			return err
		}
		var ns []apiNode
		if err := c.get(c.servers[0], "/v1/nodes", &ns); err != nil {
			return err
		}
		for _, n := range ns {
			if n.Status == "ready" {
				ids[n.Name] = n.ID
			}
		}
		if len(ids) != len(c.clients) {
			return fmt.Errorf("%d of %d clients ready: %+v", len(ids), len(c.clients), ns)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	return ids
}

// killLeftovers kills, by PID, every process still running whose command
// line names the run's directory (tasks the agents started: plugins and
// consumers outlive a killed client by design).
func killLeftovers(t *testing.T, dir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// unmountUnder lazily unmounts everything mounted under dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Logf("reading mountinfo: %v", err)
		return
	}
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			mounts = append(mounts, f[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil {
			t.Logf("unmounting %s: %v", mounts[i], err)
		}
	}
}
