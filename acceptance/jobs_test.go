package acceptance

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The jobs acceptance test: three servers and two clients as real
// processes; a service job (count 3) and a system job; a client killed -9
// has its allocs replaced on the other within the heartbeat TTL plus
// grace; restarted, it stops the allocs that were lost (its system alloc
// among them) and the system job runs there again; `job stop` stops
// everything.

// The heartbeat TTL and grace startServers configures.
const (
	jobsTTL   = 2 * time.Second
	jobsGrace = 2 * time.Second
)

// A task writes its PID where the test can read it:
// <data_dir>/alloc/<alloc>/<task>/local/pid.
const serviceJob = `
job "web" {
  type = "service"
  group "web" {
    count = 3
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "server" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > local/pid; exec sleep 3600"]
      }
      resources {
        cpu    = 50
        memory = 32
      }
      kill_timeout = "2s"
    }
  }
}
`

const systemJob = `
job "agentd" {
  type = "system"
  group "agentd" {
    task "agentd" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > local/pid; exec sleep 3600"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
`

type apiAlloc struct {
	ID            string `json:"id"`
	NodeID        string `json:"node_id"`
	JobID         string `json:"job_id"`
	TaskGroup     string `json:"task_group"`
	ClientStatus  string `json:"client_status"`
	DesiredStatus string `json:"desired_status"`
}

func (a *agent) jobAllocs(job string) ([]apiAlloc, error) {
	var out []apiAlloc
	return out, a.getJSON("/v1/job/"+job+"/allocations", &out)
}

// byNode counts the allocs of allocs in client status status per node.
func byNode(allocs []apiAlloc, status string) map[string]int {
	out := map[string]int{}
	for _, a := range allocs {
		if a.ClientStatus == status && a.DesiredStatus == "run" {
			out[a.NodeID]++
		}
	}
	return out
}

func total(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// taskPID reads the PID a task of alloc wrote on client c.
func taskPID(c *agent, alloc, task string) (int, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, "data", "alloc", alloc, task, "local", "pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// alive reports whether pid runs (and is not a zombie).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name's closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestJobsSurviveClientLoss(t *testing.T) {
	c := startJobsCluster(t)
	s := c.servers[0]
	eventually(t, 60*time.Second, "two ready nodes", func() error {
		ns, err := s.nodes()
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range ns {
			if n.Status == "ready" {
				ready++
			}
		}
		if ready != 2 {
			return fmt.Errorf("%d of %d nodes ready", ready, len(ns))
		}
		return nil
	})
	nodeOf := map[string]*agent{}
	ns, _ := s.nodes()
	for _, n := range ns {
		for _, cl := range c.clients {
			if n.Name == cl.name {
				nodeOf[n.ID] = cl
			}
		}
	}

	dir := t.TempDir()
	for name, src := range map[string]string{"web.hcl": serviceJob, "agentd.hcl": systemJob} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		// job run follows the evaluation to running allocs and fails if
		// placement or a task fails.
		if out, err := s.cli("job", "run", path); err != nil {
			t.Fatalf("job run %s: %v\n%s", name, err, out)
		}
	}
	var web []apiAlloc
	eventually(t, 60*time.Second, "3 web and 2 agentd allocs running", func() (err error) {
		if web, err = s.jobAllocs("web"); err != nil {
			return err
		}
		sys, err := s.jobAllocs("agentd")
		if err != nil {
			return err
		}
		if n := total(byNode(web, "running")); n != 3 {
			return fmt.Errorf("%d web allocs running", n)
		}
		if m := byNode(sys, "running"); len(m) != 2 || total(m) != 2 {
			return fmt.Errorf("agentd running per node: %v", m)
		}
		return nil
	})
	running := byNode(web, "running")
	if len(running) != 2 {
		t.Fatalf("web allocs per node %v: anti-affinity should spread 3 allocs over both nodes", running)
	}
	// Kill the client with the most web allocs.
	var victimNode string
	for node, n := range running {
		if victimNode == "" || n > running[victimNode] {
			victimNode = node
		}
	}
	victim := nodeOf[victimNode]
	lostAllocs := map[string]int{} // alloc → PID of its task
	for _, a := range web {
		if a.NodeID == victimNode {
			pid, err := taskPID(victim, a.ID, "server")
			if err != nil {
				t.Fatalf("pid of alloc %s: %v", a.ID, err)
			}
			lostAllocs[a.ID] = pid
		}
	}
	sys, _ := s.jobAllocs("agentd")
	var sysAlloc string
	for _, a := range sys {
		if a.NodeID == victimNode {
			sysAlloc = a.ID
		}
	}
	sysPID, err := taskPID(victim, sysAlloc, "agentd")
	if err != nil {
		t.Fatalf("pid of the system alloc: %v", err)
	}

	killed := time.Now()
	victim.kill()
	var replaced time.Duration
	eventually(t, jobsTTL+jobsGrace+30*time.Second, "web replaced on the surviving node", func() error {
		allocs, err := s.jobAllocs("web")
		if err != nil {
			return err
		}
		r := byNode(allocs, "running")
		if r[victimNode] != 0 || total(r) != 3 {
			return fmt.Errorf("running per node %v", r)
		}
		for _, a := range allocs {
			if _, ok := lostAllocs[a.ID]; ok && a.ClientStatus != "lost" {
				return fmt.Errorf("alloc %s of the killed node is %s, want lost", a.ID, a.ClientStatus)
			}
		}
		replaced = time.Since(killed)
		return nil
	})
	t.Logf("client killed -9: its %d web allocs replaced on the other node %v later (TTL %v, grace %v)",
		len(lostAllocs), replaced.Round(10*time.Millisecond), jobsTTL, jobsGrace)
	if limit := jobsTTL + jobsGrace + 5*time.Second; replaced > limit {
		t.Errorf("replacement took %v, want within TTL + grace + 5s = %v", replaced, limit)
	}
	for id, pid := range lostAllocs {
		if !alive(pid) {
			t.Fatalf("task of alloc %s (pid %d) died with its client; tasks must outlive the agent", id, pid)
		}
	}

	// The client comes back: everything that was lost — the web allocs and
	// its system alloc — is stopped there, and the system job places a new
	// alloc on the node.
	victim.start()
	lostAllocs[sysAlloc] = sysPID
	eventually(t, 60*time.Second, "the lost allocs' tasks stopped on the restarted client", func() error {
		for id, pid := range lostAllocs {
			if alive(pid) {
				return fmt.Errorf("alloc %s task pid %d still runs", id, pid)
			}
		}
		return nil
	})
	eventually(t, 30*time.Second, "a new system alloc running on the restarted client", func() error {
		allocs, err := s.jobAllocs("agentd")
		if err != nil {
			return err
		}
		if m := byNode(allocs, "running"); m[victimNode] != 1 || total(m) != 2 {
			var evals []map[string]any
			_ = s.getJSON("/v1/job/agentd/evaluations", &evals)
			var nodes []map[string]any
			_ = s.getJSON("/v1/nodes", &nodes)
			return fmt.Errorf("agentd running per node %v; allocs %+v; evals %v; nodes %v", m, allocs, evals, nodes)
		}
		return nil
	})

	// job stop stops everything.
	var pids []int
	for _, job := range []string{"web", "agentd"} {
		allocs, err := s.jobAllocs(job)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range allocs {
			if a.ClientStatus != "running" {
				continue
			}
			task := map[string]string{"web": "server", "agentd": "agentd"}[job]
			cl := c.servers[0]
			for id, ag := range nodeOf {
				if id == a.NodeID {
					cl = ag
				}
			}
			if pid, err := taskPID(cl, a.ID, task); err == nil {
				pids = append(pids, pid)
			}
		}
		if out, err := s.cli("job", "stop", job); err != nil {
			t.Fatalf("job stop %s: %v\n%s", job, err, out)
		}
	}
	if len(pids) != 5 {
		t.Fatalf("found %d running task PIDs before job stop, want 5", len(pids))
	}
	eventually(t, 30*time.Second, "every task stopped", func() error {
		for _, pid := range pids {
			if alive(pid) {
				return fmt.Errorf("pid %d still runs", pid)
			}
		}
		for _, job := range []string{"web", "agentd"} {
			allocs, err := s.jobAllocs(job)
			if err != nil {
				return err
			}
			for _, a := range allocs {
				if a.ClientStatus == "running" || a.ClientStatus == "pending" {
					return fmt.Errorf("alloc %s of %s is %s", a.ID, job, a.ClientStatus)
				}
			}
		}
		return nil
	})
}

// jobsCluster is three servers and two clients that run raw_exec tasks.
type jobsCluster struct {
	servers []*agent
	clients []*agent
}

func startJobsCluster(t *testing.T) *jobsCluster {
	t.Helper()
	servers, join := startServers(t)
	c := &jobsCluster{servers: servers}
	for i := range 2 {
		cl := newAgent(t, fmt.Sprintf("c%d", i+1), freePorts(t), fmt.Sprintf(`
client {
  enabled = true
  servers = [%s]
}
plugin "raw_exec" {
  config { enabled = true }
}`, join))
		// Tasks outlive a stopped agent by design; whatever a failed run
		// leaves behind is ended here, after the agent stopped (cleanups
		// run last-registered first, and start registers the stop). Only
		// processes that still run the test's own command line are
		// signalled.
		t.Cleanup(func() { killLeftoverTasks(cl) })
		cl.start()
		c.clients = append(c.clients, cl)
	}
	return c
}

// ours reports whether a task's command line is one the acceptance tests
// run: a sleep of theirs or the hostpath plugin of the binary under test.
func ours(cmdline string) bool {
	return strings.Contains(cmdline, "sleep\x003600") || strings.HasPrefix(cmdline, berthBin+"\x00builtin\x00csi-hostpath\x00")
}

// killLeftoverTasks ends what cl's tasks left running: every task through
// its executor's record (killExecutors), and, for a task whose executor
// had not recorded it yet, the PID a task of the tests writes to
// local/pid when its command line is still one of theirs.
func killLeftoverTasks(cl *agent) {
	killExecutors(cl)
	files, _ := filepath.Glob(filepath.Join(cl.dir, "data", "alloc", "*", "*", "local", "pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || !alive(pid) {
			continue
		}
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && ours(string(cmd)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
