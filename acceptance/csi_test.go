package acceptance

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// The CSI plugin acceptance test: three servers and two clients as real
// processes run the built-in hostpath plugin as ordinary tasks with a
// csi_plugin block, and the servers' plugin table follows them:
//
//   - a monolith in a system job: one controller and one node instance per
//     client, healthy, with the provider's name and version; job stop makes
//     the plugin vanish;
//   - a controller service job plus a node system job of one plugin:
//     counts 1/1 and 2/2; stopping the node job drops the node counts to
//     0/0 and its instances vanish while the controller stays;
//   - a client restarted keeps its plugin without restarting the task;
//   - the same plugin as an exec task (isolated, its plugin directory
//     mounted into it) is reached over its socket from the host.

// apiPluginInfo and apiPlugin are the fields of GET /v1/plugin/csi/{id}
// the test reads.
type apiPluginInfo struct {
	PluginID         string `json:"plugin_id"`
	AllocID          string `json:"alloc_id"`
	Healthy          bool   `json:"healthy"`
	Provider         string `json:"provider"`
	ProviderVersion  string `json:"provider_version"`
	HealthDescribed  string `json:"health_description"`
	ControllerNeeded bool   `json:"controller_required"`
}

type apiPlugin struct {
	ID                  string                   `json:"id"`
	Provider            string                   `json:"provider"`
	Version             string                   `json:"version"`
	ControllerRequired  bool                     `json:"controller_required"`
	ControllersHealthy  int                      `json:"controllers_healthy"`
	ControllersExpected int                      `json:"controllers_expected"`
	NodesHealthy        int                      `json:"nodes_healthy"`
	NodesExpected       int                      `json:"nodes_expected"`
	Controllers         map[string]apiPluginInfo `json:"controllers"`
	Nodes               map[string]apiPluginInfo `json:"nodes"`
	Allocations         []struct {
		AllocID string `json:"alloc_id"`
		NodeID  string `json:"node_id"`
		JobID   string `json:"job_id"`
	} `json:"allocations"`
	Schedulable bool `json:"schedulable"`
}

const hostpathProvider = "hostpath.csi.berth.dev"

func (a *agent) plugin(id string) (apiPlugin, error) {
	var p apiPlugin
	return p, a.getJSON("/v1/plugin/csi/"+id, &p)
}

// wantCounts checks a plugin's healthy/expected counts.
func wantCounts(p apiPlugin, ctrlH, ctrlE, nodeH, nodeE int) error {
	if p.ControllersHealthy != ctrlH || p.ControllersExpected != ctrlE || p.NodesHealthy != nodeH || p.NodesExpected != nodeE {
		return fmt.Errorf("plugin %s: controllers %d/%d nodes %d/%d, want %d/%d and %d/%d",
			p.ID, p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected, ctrlH, ctrlE, nodeH, nodeE)
	}
	return nil
}

// pluginGone waits until GET /v1/plugin/csi/{id} is a 404.
func pluginGone(t *testing.T, s *agent, id string) {
	t.Helper()
	eventually(t, 30*time.Second, "plugin "+id+" deleted", func() error {
		p, err := s.plugin(id)
		if err == nil {
			return fmt.Errorf("still there: %+v", p)
		}
		if !strings.Contains(err.Error(), "HTTP 404") {
			return err
		}
		return nil
	})
}

// hostpathTask is a raw_exec task running the built-in hostpath plugin of
// the berth binary under test, in mode, with its state in stateDir: a
// plugin's controller and node instances share one (as on one machine
// they may); a monolith is a controller, and one directory serves one
// controller, so each node's monolith has its own.
// The shell writes its PID where killLeftoverTasks and the test find it.
// extra are more flags of the plugin.
func hostpathTask(pluginID, typ, mode, stateDir string, extra ...string) string {
	return fmt.Sprintf(`
    task "plugin" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > local/pid; exec %s builtin csi-hostpath --endpoint ${CSI_ENDPOINT} --node-id ${node.unique.name} --mode %s --state-dir %s%s"]
      }
      csi_plugin {
        id             = %q
        type           = %q
        health_timeout = "20s"
      }
      resources {
        cpu    = 50
        memory = 64
      }
      kill_timeout = "5s"
    }`, berthBin, mode, stateDir, strings.Join(append([]string{""}, extra...), " "), pluginID, typ)
}

func csiJob(id, typ string, count int, task string) string {
	countLine := ""
	if typ != "system" {
		countLine = fmt.Sprintf("count = %d", count)
	}
	return fmt.Sprintf(`
job %q {
  type = %q
  group "plugin" {
    %s
    restart {
      attempts = 2
      interval = "1m"
      delay    = "1s"
      mode     = "fail"
    }
%s
  }
}
`, id, typ, countLine, task)
}

// runJob writes spec to a file and runs it with `berth job run -detach`.
func runJob(t *testing.T, s *agent, name, spec string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".hcl")
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := s.cli("job", "run", "-detach", path); err != nil {
		t.Fatalf("job run %s: %v\n%s", name, err, out)
	}
}

// stopAllJobs stops the jobs that exist and waits (bounded) for their
// allocs to stop running.
func stopAllJobs(t *testing.T, s *agent, jobs ...string) {
	deadline := time.Now().Add(30 * time.Second)
	for _, job := range jobs {
		if _, err := s.jobAllocs(job); err != nil {
			continue
		}
		_, _ = s.cli("job", "stop", job)
	}
	for _, job := range jobs {
		for time.Now().Before(deadline) {
			allocs, err := s.jobAllocs(job)
			if err != nil || !anyRunning(allocs) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func anyRunning(allocs []apiAlloc) bool {
	for _, a := range allocs {
		if a.ClientStatus == "running" || a.ClientStatus == "pending" {
			return true
		}
	}
	return false
}

func stopJob(t *testing.T, s *agent, job string) {
	t.Helper()
	if out, err := s.cli("job", "stop", job); err != nil {
		t.Fatalf("job stop %s: %v\n%s", job, err, out)
	}
}

func TestCSIPlugins(t *testing.T) {
	c := startCSICluster(t)
	s := c.servers[0]
	state := t.TempDir()
	// Each part stops its jobs when it ends, passed or not, while the
	// cluster is still up: a failed part does not leave plugins running into
	// the next (killLeftoverTasks ends what is left only once the agents
	// stopped).

	t.Run("monolith system job", func(t *testing.T) {
		t.Cleanup(func() { stopAllJobs(t, s, "hp-mono") })
		runJob(t, s, "hp-mono", csiJob("hp-mono", "system", 0, hostpathTask("hp-mono", "monolith", "monolith", state+"/mono-${node.unique.name}")))
		var p apiPlugin
		eventually(t, 60*time.Second, "hp-mono healthy on both clients", func() (err error) {
			if p, err = s.plugin("hp-mono"); err != nil {
				return err
			}
			return wantCounts(p, 2, 2, 2, 2)
		})
		if p.Provider != hostpathProvider || p.Version == "" {
			t.Fatalf("provider %q version %q, want %q and a version", p.Provider, p.Version, hostpathProvider)
		}
		if len(p.Allocations) != 2 || len(p.Controllers) != 2 || len(p.Nodes) != 2 {
			t.Fatalf("allocations %d, controllers %d, nodes %d; want 2 each: %+v", len(p.Allocations), len(p.Controllers), len(p.Nodes), p)
		}
		if !p.Schedulable {
			t.Fatalf("a healthy monolith on two nodes is not schedulable: %+v", p)
		}
		out, err := s.cli("plugin", "status", "hp-mono")
		if err != nil || !strings.Contains(out, hostpathProvider) {
			t.Fatalf("plugin status hp-mono: %v\n%s", err, out)
		}
		for _, cl := range c.clients {
			out, err := s.cli("node", "status", c.nodeID(t, cl))
			if err != nil || !strings.Contains(out, "hp-mono") {
				t.Fatalf("node status of %s does not list hp-mono: %v\n%s", cl.name, err, out)
			}
		}

		stopJob(t, s, "hp-mono")
		pluginGone(t, s, "hp-mono")
	})

	t.Run("controller job and node system job", func(t *testing.T) {
		t.Cleanup(func() { stopAllJobs(t, s, "hp-ctrl", "hp-node") })
		runJob(t, s, "hp-ctrl", csiJob("hp-ctrl", "service", 1, hostpathTask("hp", "controller", "controller", state+"/hp")))
		runJob(t, s, "hp-node", csiJob("hp-node", "system", 0, hostpathTask("hp", "node", "node", state+"/hp")))
		eventually(t, 60*time.Second, "hp: one controller, two nodes", func() error {
			p, err := s.plugin("hp")
			if err != nil {
				return err
			}
			if err := wantCounts(p, 1, 1, 2, 2); err != nil {
				return err
			}
			if !p.Schedulable || len(p.Allocations) != 3 {
				return fmt.Errorf("schedulable %v with %d allocations, want true with 3", p.Schedulable, len(p.Allocations))
			}
			return nil
		})

		stopJob(t, s, "hp-node")
		eventually(t, 30*time.Second, "hp's node instances gone", func() error {
			p, err := s.plugin("hp")
			if err != nil {
				return err
			}
			if err := wantCounts(p, 1, 1, 0, 0); err != nil {
				return err
			}
			if len(p.Nodes) != 0 || len(p.Allocations) != 1 {
				return fmt.Errorf("%d node instances and %d allocations left, want 0 and 1", len(p.Nodes), len(p.Allocations))
			}
			return nil
		})
		stopJob(t, s, "hp-ctrl")
		pluginGone(t, s, "hp")
	})

	t.Run("client restart keeps the plugin task", func(t *testing.T) {
		t.Cleanup(func() { stopAllJobs(t, s, "hp-keep") })
		runJob(t, s, "hp-keep", csiJob("hp-keep", "system", 0, hostpathTask("hp-keep", "monolith", "monolith", state+"/keep-${node.unique.name}")))
		eventually(t, 60*time.Second, "hp-keep healthy on both clients", func() error {
			p, err := s.plugin("hp-keep")
			if err != nil {
				return err
			}
			return wantCounts(p, 2, 2, 2, 2)
		})
		cl := c.clients[0]
		allocs, err := s.jobAllocs("hp-keep")
		if err != nil {
			t.Fatal(err)
		}
		nodeID := c.nodeID(t, cl)
		var alloc string
		for _, a := range allocs {
			if a.NodeID == nodeID && a.DesiredStatus == "run" {
				alloc = a.ID
			}
		}
		pid, err := taskPID(cl, alloc, "plugin")
		if err != nil {
			t.Fatalf("plugin task PID of alloc %s on %s: %v", alloc, cl.name, err)
		}

		cl.stop()
		if !alive(pid) {
			t.Fatalf("plugin task %d died with its client", pid)
		}
		cl.start()
		// The restarted client restores its registry entry and probes it;
		// the plugin stays healthy on both nodes, served by the same process.
		eventually(t, 30*time.Second, "hp-keep healthy after the client restart", func() error {
			p, err := s.plugin("hp-keep")
			if err != nil {
				return err
			}
			if err := wantCounts(p, 2, 2, 2, 2); err != nil {
				return err
			}
			if info, ok := p.Nodes[nodeID]; !ok || info.AllocID != alloc {
				return fmt.Errorf("node instance on %s is %+v, want alloc %s", cl.name, info, alloc)
			}
			return nil
		})
		// The restarted client's supervisor found the running plugin again
		// (its registry entry restored, probed) and said so on the task.
		eventually(t, 30*time.Second, "the plugin found again after the client restart", func() error {
			var a struct {
				TaskStates map[string]struct {
					Restarts int `json:"restarts"`
					Events   []struct {
						Type    string `json:"type"`
						Message string `json:"message"`
					} `json:"events"`
				} `json:"task_states"`
			}
			if err := s.getJSON("/v1/allocation/"+alloc, &a); err != nil {
				return err
			}
			ts := a.TaskStates["plugin"]
			if ts.Restarts != 0 {
				return fmt.Errorf("the plugin task restarted %d times", ts.Restarts)
			}
			for _, e := range ts.Events {
				if e.Type == "Plugin became healthy" && strings.Contains(e.Message, "after a client restart") {
					return nil
				}
			}
			return fmt.Errorf("no healthy-after-restart event in %+v", ts.Events)
		})
		if !alive(pid) {
			t.Fatalf("plugin task %d was restarted by the client restart", pid)
		}
		if got, err := taskPID(cl, alloc, "plugin"); err != nil || got != pid {
			t.Fatalf("plugin task PID after the client restart: %d (%v), want %d", got, err, pid)
		}
		stopJob(t, s, "hp-keep")
		pluginGone(t, s, "hp-keep")
	})

	t.Run("exec task", func(t *testing.T) {
		testutil.RequireRoot(t, "the exec driver isolates the plugin task with namespaces, mounts and cgroups")
		t.Cleanup(func() { stopAllJobs(t, s, "hp-exec") })
		// BERTH_BIN's file may have any name: the task runs it by its own.
		runJob(t, s, "hp-exec", fmt.Sprintf(`
job "hp-exec" {
  type = "system"
  group "plugin" {
    task "plugin" {
      driver = "exec"
      config {
        command = %q
        args    = ["builtin", "csi-hostpath", "--endpoint", "${CSI_ENDPOINT}", "--node-id", "${node.unique.name}", "--state-dir", "/local/state"]
        cap_add = ["SYS_ADMIN"]
      }
      csi_plugin {
        id   = "hp-exec"
        type = "monolith"
      }
      resources {
        cpu    = 50
        memory = 64
      }
    }
  }
}
`, "/opt/berth/"+filepath.Base(berthBin)))
		eventually(t, 60*time.Second, "hp-exec healthy on both clients", func() error {
			p, err := s.plugin("hp-exec")
			if err != nil {
				return err
			}
			if err := wantCounts(p, 2, 2, 2, 2); err != nil {
				return err
			}
			if p.Provider != hostpathProvider {
				return fmt.Errorf("provider %q, want %q", p.Provider, hostpathProvider)
			}
			return nil
		})
		// The host reached the plugin over the socket the task made in its
		// own root: the plugin directory is mounted into the task. (That the
		// mount propagates both ways is proven at the driver level, by
		// builtin/drivers/exec's TestCSIPluginAsExecTask; volumes published
		// through such a plugin are the volume hook's acceptance test.)
		for _, cl := range c.clients {
			socks, _ := filepath.Glob(filepath.Join(cl.dir, "data", "csi", "plugins", "*", "csi.sock"))
			if len(socks) != 1 {
				t.Fatalf("%s has %d plugin sockets on the host, want 1: %v", cl.name, len(socks), socks)
			}
		}
		stopJob(t, s, "hp-exec")
		pluginGone(t, s, "hp-exec")
	})
}

// csiCluster is three servers and two clients with raw_exec and, as
// root, exec (its tasks see berth's binary in /opt/berth, under its own
// file name).
type csiCluster struct {
	servers []*agent
	clients []*agent
	exec    bool
}

// chrootBind is one more chroot_env entry of the clients' exec driver: a
// host directory and where tasks see it.
type chrootBind struct{ host, task string }

// startCSICluster starts the cluster; binds are added to the exec driver's
// chroot_env (read-only in the tasks, as the driver binds them).
func startCSICluster(t *testing.T, binds ...chrootBind) *csiCluster {
	t.Helper()
	servers, join := startServers(t)
	// Without root the exec plugin is left out; the test of its part ends
	// through testutil.RequireRoot (a failure under CI).
	c := &csiCluster{servers: servers, exec: os.Geteuid() == 0}
	execBlock := ""
	if c.exec {
		more := ""
		for _, b := range binds {
			more += fmt.Sprintf(", %q = %q", b.host, b.task)
		}
		execBlock = fmt.Sprintf(`
plugin "exec" {
  config {
    enabled    = true
    chroot_env = { "/bin" = "/bin", "/etc" = "/etc", "/lib" = "/lib", "/lib64" = "/lib64", "/usr" = "/usr", "/sbin" = "/sbin", %q = "/opt/berth"%s }
  }
}`, filepath.Dir(berthBin), more)
	}
	for i := range 2 {
		cl := newAgent(t, fmt.Sprintf("c%d", i+1), freePorts(t), fmt.Sprintf(`
client {
  enabled = true
  servers = [%s]
}
plugin "raw_exec" {
  config { enabled = true }
}
%s`, join, execBlock))
		// After the agent stops (cleanups run last-registered first): its
		// tasks are ended, then whatever a failed run left mounted under
		// its directory is unmounted.
		t.Cleanup(func() { unmountUnder(t, cl.dir) })
		t.Cleanup(func() { killLeftoverTasks(cl) })
		cl.start()
		c.clients = append(c.clients, cl)
	}
	// The cluster is ready when the first server answers and knows both
	// clients ready.
	eventually(t, 60*time.Second, "both clients ready", func() error {
		nodes, err := servers[0].nodes()
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range nodes {
			if n.Status == "ready" {
				ready++
			}
		}
		if ready != len(c.clients) {
			return fmt.Errorf("%d of %d clients ready: %+v", ready, len(c.clients), nodes)
		}
		return nil
	})
	return c
}

// nodeID is the client's node ID, as the servers know it by name.
func (c *csiCluster) nodeID(t *testing.T, cl *agent) string {
	t.Helper()
	var id string
	eventually(t, 30*time.Second, cl.name+" registered", func() error {
		nodes, err := c.servers[0].nodes()
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Name == cl.name {
				id = n.ID
				return nil
			}
		}
		return fmt.Errorf("no node named %s", cl.name)
	})
	return id
}
