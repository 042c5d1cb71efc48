package acceptance

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cluster is three servers and one client, from config files.
type cluster struct {
	servers []*agent
	client  *agent
	// clientBody is the config body of a client agent of this cluster.
	clientBody string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	servers, join := startServers(t)
	c := &cluster{servers: servers}
	c.clientBody = fmt.Sprintf(`
client {
  enabled = true
  servers = [%s]
}`, join)
	c.client = newAgent(t, "c1", freePorts(t), c.clientBody)
	c.client.start()
	return c
}

// startServers starts three servers that form a cluster (heartbeat TTL 2s,
// grace 2s) and returns them with their RPC addresses as an HCL list body.
func startServers(t *testing.T) ([]*agent, string) {
	t.Helper()
	var ps []ports
	var join []string
	for range 3 {
		p := freePorts(t)
		ps = append(ps, p)
		join = append(join, fmt.Sprintf("%q", fmt.Sprintf("127.0.0.1:%d", p.rpc)))
	}
	var servers []*agent
	for i, p := range ps {
		s := newAgent(t, fmt.Sprintf("s%d", i+1), p, fmt.Sprintf(`
server {
  enabled          = true
  bootstrap_expect = 3
  retry_join       = [%s]
  retry_interval   = "1s"
  heartbeat_ttl    = "2s"
  heartbeat_grace  = "2s"
}`, strings.Join(join, ", ")))
		s.start()
		servers = append(servers, s)
	}
	return servers, strings.Join(join, ", ")
}

// agreedLeader returns the leader RPC address all given servers report.
func agreedLeader(servers []*agent) (string, error) {
	var leader string
	for _, s := range servers {
		l, err := s.leader()
		if err != nil {
			return "", err
		}
		if l == "" {
			return "", fmt.Errorf("%s knows no leader", s.name)
		}
		if leader != "" && l != leader {
			return "", fmt.Errorf("%s sees leader %s, others %s", s.name, l, leader)
		}
		leader = l
	}
	return leader, nil
}

func (c *cluster) byRPC(addr string) *agent {
	for _, s := range c.servers {
		if s.rpcAddr == addr {
			return s
		}
	}
	return nil
}

func without(all []*agent, x *agent) []*agent {
	var out []*agent
	for _, a := range all {
		if a != x {
			out = append(out, a)
		}
	}
	return out
}

// waitNodeStatus waits until s lists exactly one node, in the given status.
func waitNodeStatus(t *testing.T, s *agent, status string, timeout time.Duration) apiNode {
	t.Helper()
	var node apiNode
	eventually(t, timeout, "node "+status+" on "+s.name, func() error {
		ns, err := s.nodes()
		if err != nil {
			return err
		}
		if len(ns) != 1 {
			return fmt.Errorf("%d nodes listed, want 1", len(ns))
		}
		node = ns[0]
		if node.Status != status {
			return fmt.Errorf("node %s is %s", node.Name, node.Status)
		}
		return nil
	})
	return node
}

func TestThreeServersSurviveLeaderKillAndRestart(t *testing.T) {
	c := startCluster(t)
	var leaderAddr string
	eventually(t, 60*time.Second, "cluster elects a leader", func() (err error) {
		leaderAddr, err = agreedLeader(c.servers)
		return err
	})
	waitNodeStatus(t, c.servers[0], "ready", 30*time.Second)

	out, err := c.servers[1].cli("server", "members")
	if err != nil {
		t.Fatalf("server members: %v\n%s", err, out)
	}
	if n := strings.Count(out, "alive"); n != 3 {
		t.Fatalf("server members shows %d alive servers, want 3:\n%s", n, out)
	}

	rounds := 1
	if long() {
		rounds = 5
	}
	for round := range rounds {
		old := c.byRPC(leaderAddr)
		if old == nil {
			t.Fatalf("leader %s is not one of our servers", leaderAddr)
		}
		survivors := without(c.servers, old)
		old.kill()
		killed := time.Now()
		eventually(t, 30*time.Second, "survivors elect a new leader", func() error {
			l, err := agreedLeader(survivors)
			if err != nil {
				return err
			}
			if l == old.rpcAddr {
				return fmt.Errorf("survivors still follow the killed leader")
			}
			leaderAddr = l
			return nil
		})
		failover := time.Since(killed)
		t.Logf("round %d: killed leader %s; new leader %s after %s", round+1, old.name, leaderAddr, failover.Round(time.Millisecond))

		// The node keeps heartbeating to the survivors: still ready after
		// the new leader's TTL and grace have passed twice over.
		waitNodeStatus(t, survivors[0], "ready", 5*time.Second)
		time.Sleep(8 * time.Second)
		waitNodeStatus(t, survivors[1], "ready", time.Second)

		old.start()
		newLeader := c.byRPC(leaderAddr)
		eventually(t, 60*time.Second, old.name+" rejoins and catches up", func() error {
			var self struct {
				Server struct {
					RaftState    string `json:"raft_state"`
					LeaderID     string `json:"leader_id"`
					AppliedIndex uint64 `json:"applied_index"`
				} `json:"server"`
			}
			if err := old.getJSON("/v1/agent/self", &self); err != nil {
				return err
			}
			if self.Server.RaftState != "Follower" || self.Server.LeaderID == "" {
				return fmt.Errorf("%s is %s with leader %q", old.name, self.Server.RaftState, self.Server.LeaderID)
			}
			var lself struct {
				Server struct {
					AppliedIndex uint64 `json:"applied_index"`
				} `json:"server"`
			}
			if err := newLeader.getJSON("/v1/agent/self", &lself); err != nil {
				return err
			}
			if self.Server.AppliedIndex < lself.Server.AppliedIndex {
				return fmt.Errorf("%s applied %d, leader %d", old.name, self.Server.AppliedIndex, lself.Server.AppliedIndex)
			}
			ns, err := old.nodes()
			if err != nil {
				return err
			}
			if len(ns) != 1 || ns[0].Status != "ready" {
				return fmt.Errorf("%s lists %v", old.name, ns)
			}
			return nil
		})
		eventually(t, 30*time.Second, "three alive members", func() error {
			out, err := old.cli("server", "members")
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			if n := strings.Count(out, "alive"); n != 3 {
				return fmt.Errorf("%d alive:\n%s", n, out)
			}
			return nil
		})
	}
}

func TestSnapshotSaveAndRestoreRoundTrip(t *testing.T) {
	c := startCluster(t)
	eventually(t, 60*time.Second, "cluster elects a leader", func() error {
		_, err := agreedLeader(c.servers)
		return err
	})
	waitNodeStatus(t, c.servers[0], "ready", 30*time.Second)
	// Freeze the state: with its client gone and the node down, nothing
	// changes it, so the snapshot holds exactly what we read.
	c.client.stop()
	saved := waitNodeStatus(t, c.servers[0], "down", 30*time.Second)

	// Save through any server: followers forward to the leader.
	file := filepath.Join(t.TempDir(), "cluster.snap")
	out, err := c.servers[2].cli("operator", "snapshot", "save", file)
	if err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}

	// Change the state: a second client registers, then goes away.
	second := newAgent(t, "c2", freePorts(t), c.clientBody)
	second.start()
	eventually(t, 30*time.Second, "second node registers", func() error {
		ns, err := c.servers[0].nodes()
		if err != nil {
			return err
		}
		if len(ns) != 2 {
			return fmt.Errorf("%d nodes", len(ns))
		}
		return nil
	})
	second.stop()

	out, err = c.servers[1].cli("operator", "snapshot", "restore", file)
	if err != nil {
		t.Fatalf("snapshot restore: %v\n%s", err, out)
	}
	// Every server now holds the saved state: the first node exactly as it
	// was, the second gone.
	for _, s := range c.servers {
		got := waitNodeStatus(t, s, "down", 10*time.Second)
		if got != saved {
			t.Fatalf("%s after restore: node %+v, want %+v", s.name, got, saved)
		}
	}

	// A damaged file is refused and the state is untouched.
	bad := filepath.Join(t.TempDir(), "bad.snap")
	if out, err := c.servers[0].cli("operator", "snapshot", "save", bad); err != nil {
		t.Fatalf("second save: %v\n%s", err, out)
	}
	truncate(t, bad)
	out, err = c.servers[0].cli("operator", "snapshot", "restore", bad)
	if err == nil || !strings.Contains(out, "invalid_argument") {
		t.Fatalf("restoring a truncated snapshot: err=%v\n%s", err, out)
	}
	if got := waitNodeStatus(t, c.servers[0], "down", time.Second); got != saved {
		t.Fatalf("refused restore changed the state: %+v, want %+v", got, saved)
	}
}
