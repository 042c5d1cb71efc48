package acceptance

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The ACL acceptance test: three servers and a client as real processes,
// every one with acl { enabled = true }. The client registers and runs
// allocs (node calls need no token); bootstrap → policy → token over the
// CLI; a read-only token reads and cannot write; the management token runs
// a job to running; a token without csi-mount-volume cannot run a job that
// mounts a volume; a new leader knows every token.

const aclBlock = `
acl {
  enabled = true
}`

// aclTLS makes a CA and a server and a client certificate with `berth
// tls`, and returns the tls block of each role ACL needs: rpc with
// verify_server_hostname (the HTTP API stays plain for the CLI).
func aclTLS(t *testing.T) (server, client string) {
	t.Helper()
	dir := t.TempDir()
	for _, argv := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-server"}, {"tls", "cert", "create", "-client"}} {
		cmd := exec.Command(berthBin, argv...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("berth %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	block := func(role string) string {
		return fmt.Sprintf(`
tls {
  ca_file   = %q
  cert_file = %q
  key_file  = %q
  rpc       = true
  verify_server_hostname = true
}`, filepath.Join(dir, "berth-agent-ca.pem"), filepath.Join(dir, "global-"+role+"-berth.pem"), filepath.Join(dir, "global-"+role+"-berth-key.pem"))
	}
	return block("server"), block("client")
}

func TestACLCluster(t *testing.T) {
	serverTLS, clientTLS := aclTLS(t)
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
}`, strings.Join(join, ", "))+aclBlock+serverTLS)
		s.start()
		servers = append(servers, s)
	}
	client := newAgent(t, "c1", freePorts(t), fmt.Sprintf(`
client {
  enabled = true
  servers = [%s]
}
plugin "raw_exec" {
  config { enabled = true }
}`, strings.Join(join, ", "))+aclBlock+clientTLS)
	// The task writes its PID where killLeftoverTasks finds it, should the
	// job's stop not have ended it before the agents stop.
	t.Cleanup(func() { killLeftoverTasks(client) })
	client.start()
	eventually(t, 30*time.Second, "a leader all servers agree on", func() error {
		_, err := agreedLeader(servers)
		return err
	})

	cli := func(args ...string) (string, error) { return client.cli(args...) }
	must := func(args ...string) string {
		t.Helper()
		out, err := cli(args...)
		if err != nil {
			t.Fatalf("berth %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	refused := func(want string, args ...string) {
		t.Helper()
		out, err := cli(args...)
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("berth %s: %v, want a refusal naming %q:\n%s", strings.Join(args, " "), err, want, out)
		}
	}

	refused("permission denied", "node", "status")
	var boot struct {
		SecretID string `json:"secret_id"`
	}
	// The servers take ACL commands once each has recorded its version.
	eventually(t, 30*time.Second, "bootstrap", func() error {
		out, err := cli("acl", "bootstrap", "-json")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return json.Unmarshal([]byte(out), &boot)
	})
	mgmt := boot.SecretID
	refused("already done", "acl", "bootstrap")

	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	must("acl", "policy", "apply", "-token", mgmt, "readonly", write("ro.hcl", "job { policy = \"read\" }\nnode { policy = \"read\" }\n"))
	must("acl", "policy", "apply", "-token", mgmt, "deployer", write("dep.hcl", "job { policy = \"write\" }\n"))
	token := func(policy string) string {
		var tok struct {
			SecretID string `json:"secret_id"`
		}
		out := must("acl", "token", "create", "-token", mgmt, "-name", policy, "-policy", policy, "-json")
		if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.SecretID == "" {
			t.Fatalf("token create: %v\n%s", err, out)
		}
		return tok.SecretID
	}
	ro, dep := token("readonly"), token("deployer")

	// The client registered under ACL: node calls need no token.
	eventually(t, 30*time.Second, "client c1 ready", func() error {
		out, err := cli("node", "status", "-token", ro)
		if err != nil || !strings.Contains(out, "c1") || !strings.Contains(out, "ready") {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	job := write("web.hcl", `
job "web" {
  type = "service"
  group "web" {
    count = 1
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
    }
  }
}
`)
	refused(`capability "submit-job" on job is required`, "job", "run", "-detach", "-token", ro, job)
	must("job", "run", "-detach", "-token", mgmt, job)
	t.Cleanup(func() { _, _ = cli("job", "stop", "-token", mgmt, "-purge", "web") })
	eventually(t, 60*time.Second, "web running", func() error {
		out, err := cli("job", "status", "-token", ro, "web")
		if err != nil || !strings.Contains(out, "running") {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	mounting := write("db.hcl", `
job "db" {
  group "db" {
    volume "data" {
      type   = "csi"
      source = "vol1"
    }
    task "server" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
    }
  }
}
`)
	refused(`capability "csi-mount-volume" on volume is required`, "job", "run", "-detach", "-token", dep, mounting)

	// A new leader knows every token.
	leaderAddr, err := agreedLeader(servers)
	if err != nil {
		t.Fatal(err)
	}
	var rest []*agent
	for _, s := range servers {
		if s.rpcAddr == leaderAddr {
			s.kill()
			continue
		}
		rest = append(rest, s)
	}
	eventually(t, 30*time.Second, "a new leader", func() error {
		l, err := agreedLeader(rest)
		if err == nil && l == leaderAddr {
			return fmt.Errorf("the killed server still leads")
		}
		return err
	})
	eventually(t, 30*time.Second, "read with the read-only token after the leader change", func() error {
		out, err := cli("job", "status", "-token", ro, "web")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	refused(`capability "submit-job" on job is required`, "job", "run", "-detach", "-token", ro, job)
}
