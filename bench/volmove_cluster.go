package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// The volmove section's cluster: three servers and two clients, each a
// real `berth run` process of one binary on loopback, with data dirs of
// their own (raft on disk and the state DB fsynced, as in production),
// the built-in hostpath plugin's controller in a service job and its node
// in a system job, sharing one state directory (one machine, one pool),
// and one single-node-writer volume: the layout of acceptance's
// TestVolumeMove.

const (
	volMovePluginID = "bench-hpm"
	volMoveVolumeID = "bench-mv"
)

type volMoveCluster struct {
	bin     string
	dir     string
	servers []*volMoveAgent
	clients []*volMoveAgent
	// nodeIDs are the clients' node IDs, in clients' order.
	nodeIDs []string
	api     *api.Client // the first server's HTTP API
}

// leaderAPI returns the HTTP APIs of the server leading now and of a
// follower: the points a blocking query observes are seen on the leader
// first (a follower applies each command after the leader), and the
// follower shows what a client served by one sees.
func (c *volMoveCluster) leaderAPI(ctx context.Context) (leader, follower *api.Client, err error) {
	addr, err := c.api.Leader(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range c.servers {
		cl, err := api.NewClient("http://" + s.http)
		if err != nil {
			return nil, nil, err
		}
		if s.rpc == addr {
			leader = cl
		} else if follower == nil {
			follower = cl
		}
	}
	if leader == nil {
		return nil, nil, fmt.Errorf("the leader %q is none of the servers", addr)
	}
	return leader, follower, nil
}

type volMoveAgent struct {
	name    string
	cmd     *exec.Cmd
	http    string
	rpc     string
	dir     string
	logPath string
}

func freeLoopbackPorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startVolMoveCluster starts the cluster of bin, the plugin and the
// volume, and returns once the plugin is schedulable with one controller
// and two nodes and the volume exists.
func startVolMoveCluster(bin string) (_ *volMoveCluster, err error) {
	// Short: a plugin's socket path under a client's data dir must fit a
	// unix socket address.
	dir, err := os.MkdirTemp("", "bvm-")
	if err != nil {
		return nil, err
	}
	c := &volMoveCluster{bin: bin, dir: dir}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (logs under %s)", err, dir)
			c.stop(false)
		}
	}()
	ports, err := freeLoopbackPorts(5 * 3)
	if err != nil {
		return nil, err
	}
	join, err := c.startServers(ports, "")
	if err != nil {
		return nil, err
	}
	for i := range 2 {
		cl, err := c.startAgent(fmt.Sprintf("c%d", i+1), ports[9+3*i:9+3*i+3], fmt.Sprintf(`
client {
  enabled = true
  servers = [%s]
}
plugin "raw_exec" {
  config { enabled = true }
}`, strings.Join(join, ", ")))
		if err != nil {
			return nil, err
		}
		c.clients = append(c.clients, cl)
	}
	if c.api, err = api.NewClient("http://" + c.servers[0].http); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.waitClients(ctx); err != nil {
		return nil, err
	}
	if err := c.setUpPlugin(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// startServers starts three servers on ports[0:9] that join each other,
// with extra lines in their server block, and returns their RPC
// addresses quoted for an HCL list (a client's servers).
func (c *volMoveCluster) startServers(ports []int, extra string) ([]string, error) {
	var join []string
	for i := range 3 {
		join = append(join, fmt.Sprintf("%q", fmt.Sprintf("127.0.0.1:%d", ports[3*i+1])))
	}
	for i := range 3 {
		s, err := c.startAgent(fmt.Sprintf("s%d", i+1), ports[3*i:3*i+3], fmt.Sprintf(`
server {
  enabled          = true
  bootstrap_expect = 3
  retry_join       = [%s]
  retry_interval   = "1s"
%s}`, strings.Join(join, ", "), extra))
		if err != nil {
			return join, err
		}
		c.servers = append(c.servers, s)
	}
	return join, nil
}

func (c *volMoveCluster) startAgent(name string, ports []int, body string) (*volMoveAgent, error) {
	dir := filepath.Join(c.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `name      = %q
data_dir  = %q
bind_addr = "127.0.0.1"
ports {
  http = %d
  rpc  = %d
  raft = %d
}
%s
`, name, filepath.Join(dir, "d"), ports[0], ports[1], ports[2], body), 0o644); err != nil {
		return nil, err
	}
	a := &volMoveAgent{name: name, http: fmt.Sprintf("127.0.0.1:%d", ports[0]), rpc: fmt.Sprintf("127.0.0.1:%d", ports[1]), dir: dir, logPath: filepath.Join(dir, "agent.log")}
	logf, err := os.Create(a.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	a.cmd = exec.Command(c.bin, "run", "-config", cfg)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.cmd.Start(); err != nil {
		return nil, err
	}
	return a, nil
}

// waitClients waits until the servers know both clients ready with
// raw_exec, and records their node IDs.
func (c *volMoveCluster) waitClients(ctx context.Context) error {
	for {
		nodes, _, err := c.api.Nodes(ctx, nil)
		ids := map[string]string{}
		for _, n := range nodes {
			if n.GetStatus() == pb.NodeStatus_NODE_STATUS_READY && n.GetDrivers()["raw_exec"].GetHealthy() {
				ids[n.GetName()] = n.GetId()
			}
		}
		if len(ids) == len(c.clients) {
			for _, cl := range c.clients {
				c.nodeIDs = append(c.nodeIDs, ids[cl.name])
			}
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(errors.New("the clients did not become ready"), err, ctx.Err())
		}
		time.Sleep(100 * time.Millisecond) // start-up only, not a measured path
	}
}

// setUpPlugin runs the plugin's controller and node jobs, waits for the
// plugin to be schedulable everywhere and creates the volume.
func (c *volMoveCluster) setUpPlugin(ctx context.Context) error {
	state := filepath.Join(c.dir, "hostpath-state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	for _, p := range []struct{ job, typ, mode, count string }{
		{"bench-hpm-ctrl", "service", "controller", "count = 1"},
		{"bench-hpm-node", "system", "node", ""},
	} {
		job, err := jobspec.Parse(p.job+".hcl", fmt.Appendf(nil, `
job %q {
  type = %q
  group "plugin" {
    %s
    task "plugin" {
      driver = "raw_exec"
      config {
        command = %q
        args    = ["builtin", "csi-hostpath", "--endpoint", "${CSI_ENDPOINT}", "--node-id", "${node.unique.name}",
                   "--mode", %q, "--state-dir", %q]
      }
      csi_plugin {
        id   = %q
        type = %q
      }
      resources {
        cpu    = 50
        memory = 64
      }
    }
  }
}
`, p.job, p.typ, p.count, c.bin, p.mode, state, volMovePluginID, p.mode))
		if err != nil {
			return err
		}
		if _, err := c.api.Jobs().Register(ctx, job, nil); err != nil {
			return fmt.Errorf("registering %s: %w", p.job, err)
		}
	}
	q := &api.QueryOptions{WaitTime: 20 * time.Second, Params: map[string]string{"prefix": volMovePluginID}}
	for ready := false; !ready; {
		plugins, meta, err := c.api.CSIPlugins().List(ctx, q)
		if err != nil {
			return fmt.Errorf("waiting for plugin %s: %w", volMovePluginID, err)
		}
		for _, p := range plugins {
			ready = ready || (p.GetId() == volMovePluginID && p.GetSchedulable() &&
				p.GetControllersHealthy() == 1 && p.GetNodesHealthy() == int32(len(c.clients)))
		}
		q.WaitIndex = meta.LastIndex
	}
	return createBenchVolume(ctx, c.api, volMoveVolumeID, volMovePluginID)
}

// stop stops the consumer, waits until its claim is freed (its teardown
// needs the plugin's node instances), then the plugin's jobs, then the
// agents, clients first; it unmounts whatever a failed run left mounted
// under the cluster's directory and removes it unless keep.
func (c *volMoveCluster) stop(keep bool) {
	if c.api != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, _ = c.api.Jobs().Deregister(ctx, volMoveJobID, false)
		_ = waitVolumeIdle(ctx, c.api)
		for _, job := range []string{"bench-hpm-node", "bench-hpm-ctrl"} {
			_, _ = c.api.Jobs().Deregister(ctx, job, false)
		}
		// The plugin tasks (and their raw_exec executors) outlive a client
		// agent by design, so they must be gone before the agents stop.
		for _, job := range []string{"bench-hpm-node", "bench-hpm-ctrl"} {
			_ = waitJobAllocsDone(ctx, c.api, job)
		}
		cancel()
	}
	for _, group := range [][]*volMoveAgent{c.clients, c.servers} {
		for _, a := range group {
			a.stop()
		}
	}
	unmountUnder(c.dir)
	if !keep {
		_ = os.RemoveAll(c.dir)
	}
}

// unmountUnder detaches every mount under dir, deepest first, so removing
// dir never reaches through a volume's bind mount.
func unmountUnder(dir string) {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// waitVolumeIdle follows the volume until it has no claim left.
func waitVolumeIdle(ctx context.Context, c *api.Client) error {
	q := &api.QueryOptions{WaitTime: 10 * time.Second}
	for {
		view, meta, err := c.Volumes().Info(ctx, volMoveVolumeID, q)
		if err != nil {
			return err
		}
		if len(view.GetClaims()) == 0 {
			return nil
		}
		q.WaitIndex = meta.LastIndex
	}
}

func (a *volMoveAgent) stop() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = a.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-done
	}
}

// waitJobAllocsDone waits, with blocking queries, until every alloc of job
// has ended on its client.
func waitJobAllocsDone(ctx context.Context, c *api.Client, job string) error {
	q := &api.QueryOptions{WaitTime: 10 * time.Second}
	for {
		allocs, meta, err := c.Jobs().Allocations(ctx, job, q)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(allocs, func(a *pb.Allocation) bool { return !rules.AllocClientTerminal(a) }) {
			return nil
		}
		q.WaitIndex = meta.LastIndex
	}
}
