package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

var berthBin string

func TestMain(m *testing.M) {
	os.Exit(testutil.RunWithBerth(m, "acceptance", "..", &berthBin))
}

func long() bool { return os.Getenv("BERTH_ACCEPTANCE_LONG") != "" }

// agent is one berth process the test started.
type agent struct {
	t        *testing.T
	name     string
	dir      string
	config   string
	httpAddr string
	rpcAddr  string
	cmd      *exec.Cmd
	exited   chan struct{}
	logPath  string
	// flags are added to `berth run -config <file>` (-dev for a dev agent).
	flags []string
	// stopRegistered: start has registered stop as a cleanup.
	stopRegistered bool
}

type ports struct{ http, rpc, raft int }

// Ports for agents come from below the kernel's ephemeral range (32768 and
// up on Linux), where the port-0 listeners of other tests running in
// parallel never land; each is checked free and never handed out twice by
// this process.
const (
	portLow  = 20000
	portHigh = 32000
)

var (
	portMu   sync.Mutex
	portNext = portLow + rand.IntN(portHigh-portLow)
)

func freePorts(t *testing.T) ports {
	t.Helper()
	return ports{freePort(t), freePort(t), freePort(t)}
}

func freePort(t *testing.T) int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for range portHigh - portLow {
		p := portNext
		portNext++
		if portNext == portHigh {
			portNext = portLow
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		return p
	}
	t.Fatalf("no free port in %d-%d", portLow, portHigh)
	return 0
}

// newAgent writes the agent's config file; start launches it.
func newAgent(t *testing.T, name string, p ports, body string) *agent {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`
name      = %q
data_dir  = %q
bind_addr = "127.0.0.1"
log_level = "debug"
ports {
  http = %d
  rpc  = %d
  raft = %d
}
%s
`, name, filepath.Join(dir, "data"), p.http, p.rpc, p.raft, body)
	path := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return &agent{
		t: t, name: name, dir: dir, config: path,
		httpAddr: fmt.Sprintf("127.0.0.1:%d", p.http),
		rpcAddr:  fmt.Sprintf("127.0.0.1:%d", p.rpc),
		logPath:  filepath.Join(dir, "agent.log"),
	}
}

func (a *agent) start() {
	a.t.Helper()
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		a.t.Fatal(err)
	}
	a.cmd = exec.Command(berthBin, append([]string{"run", "-config", a.config}, a.flags...)...)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.cmd.Start(); err != nil {
		a.t.Fatalf("starting %s: %v", a.name, err)
	}
	a.exited = make(chan struct{})
	cmd, exited := a.cmd, a.exited
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	// One cleanup for the agent's life, registered at its first start:
	// it stops whichever process is current. One per restart would stop a
	// restarted agent before cleanups registered after its first start
	// (stopping its jobs) could use it.
	if !a.stopRegistered {
		a.stopRegistered = true
		a.t.Cleanup(a.stop)
	}
}

// kill sends SIGKILL to this agent's process (started by the test).
func (a *agent) kill() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
}

// stop asks the agent to shut down gracefully, killing it after 10s.
func (a *agent) stop() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	select {
	case <-a.exited:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		a.kill()
	}
	if a.t.Failed() {
		if b, err := os.ReadFile(a.logPath); err == nil {
			a.t.Logf("---- log of %s ----\n%s", a.name, tail(string(b), 60))
		}
	}
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// getJSON GETs path from the agent's API into out.
func (a *agent) getJSON(path string, out any) error {
	resp, err := httpClient.Get("http://" + a.httpAddr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s GET %s: HTTP %d: %s", a.name, path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}

func (a *agent) leader() (string, error) {
	var l string
	err := a.getJSON("/v1/status/leader", &l)
	return l, err
}

// cli runs a berth CLI command against this agent.
func (a *agent) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, berthBin, args...)
	cmd.Env = append(os.Environ(), "BERTH_ADDR=http://"+a.httpAddr)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// eventually is testutil.WaitFor with the condition named in the failure.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	testutil.WaitFor(t, timeout, func() error {
		if err := cond(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

type apiNode struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Status      string `json:"status"`
	ModifyIndex uint64 `json:"modify_index"`
}

func (a *agent) nodes() ([]apiNode, error) {
	var ns []apiNode
	return ns, a.getJSON("/v1/nodes", &ns)
}
