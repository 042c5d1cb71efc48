package acceptance

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/host/client/state"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// The security acceptance test (issue 21): three servers and two clients
// as real processes, every one with mutual TLS on RPC and HTTPS (client
// certificates verified, server hostnames checked) and ACL, from
// certificates made by `berth tls`:
//
//   - ACL is bootstrapped through the CLI over HTTPS;
//   - a job mounting a CSI volume (the built-in hostpath adapter, on the
//     first client only) runs with a token that has submit-job and
//     csi-mount-volume, and its stop frees the claim;
//   - a client agent with a certificate of another CA never registers:
//     the servers never list it, its log shows the refused handshake;
//   - a client certificate cannot join raft (the raft port hangs up on
//     it) nor call a server-only RPC (Operator.Join: PermissionDenied);
//   - a node presenting another node's ID with its own secret is refused,
//     and a node without a claim cannot read the claim's volume secrets
//     (Claims.ClientClaim: refused);
//   - a read-only token cannot write, a token without csi-mount-volume
//     cannot run a job mounting a volume (403 naming the capability);
//   - a server reloads rotated certificates (same CA) on SIGHUP, serves
//     the new one and the cluster runs a job after.

// secPKI is the certificates `berth tls` made for the test.
type secPKI struct {
	dir string
	// roots trusts the cluster's CA; cli is the cli certificate.
	roots   *x509.CertPool
	cliCert tls.Certificate
}

func (p *secPKI) path(name string) string { return filepath.Join(p.dir, name) }

// berthIn runs the berth CLI with dir as its working directory.
func berthIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(berthBin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("berth %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newSecPKI(t *testing.T) *secPKI {
	t.Helper()
	p := &secPKI{dir: t.TempDir()}
	berthIn(t, p.dir, "tls", "ca", "create")
	for _, role := range []string{"-server", "-server", "-server", "-client", "-client", "-cli"} {
		berthIn(t, p.dir, "tls", "cert", "create", role)
	}
	caPEM, err := os.ReadFile(p.path("berth-agent-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	p.roots = x509.NewCertPool()
	p.roots.AppendCertsFromPEM(caPEM)
	if p.cliCert, err = tls.LoadX509KeyPair(p.path("global-cli-berth.pem"), p.path("global-cli-berth-key.pem")); err != nil {
		t.Fatal(err)
	}
	return p
}

// tlsBlock copies a certificate and key (and the CA file) into the agent's
// own directory, so that one agent's can be rotated alone, and returns its
// tls and acl blocks.
func tlsBlock(t *testing.T, own, ca, cert, key string) string {
	t.Helper()
	if err := os.MkdirAll(own, 0o700); err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{ca: "ca.pem", cert: "cert.pem", key: "key.pem"} {
		copyInto(t, from, filepath.Join(own, to))
	}
	return fmt.Sprintf(`
tls {
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
}`, filepath.Join(own, "ca.pem"), filepath.Join(own, "cert.pem"), filepath.Join(own, "key.pem"))
}

func copyInto(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// cli runs the CLI against a over HTTPS with the cli certificate and
// token (BERTH_TOKEN; none when empty).
func (p *secPKI) cli(a *agent, token string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, berthBin, args...)
	cmd.Env = append(os.Environ(), "BERTH_ADDR=https://"+a.httpAddr, "BERTH_CACERT="+p.path("berth-agent-ca.pem"),
		"BERTH_CLIENT_CERT="+p.path("global-cli-berth.pem"), "BERTH_CLIENT_KEY="+p.path("global-cli-berth-key.pem"), "BERTH_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// getJSON GETs path from a over HTTPS with the cli certificate and token.
func (p *secPKI) getJSON(a *agent, token, path string, out any) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.cliCert}}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest("GET", "https://"+a.httpAddr+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Berth-Token", token)
	resp, err := hc.Do(req)
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

// servedSerial is the serial of the certificate a's HTTPS answers with on
// a new connection.
func (p *secPKI) servedSerial(a *agent) (string, error) {
	c, err := tls.Dial("tcp", a.httpAddr, &tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.cliCert}})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func certSerial(t *testing.T, path string) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(path, strings.TrimSuffix(path, ".pem")+"-key.pem")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}

func TestSecureCluster(t *testing.T) {
	testutil.RequireRoot(t, "the hostpath storage adapter bind-mounts the volume")
	pki := newSecPKI(t)
	ca := pki.path("berth-agent-ca.pem")

	var ps []ports
	var join []string
	for range 3 {
		p := freePorts(t)
		ps = append(ps, p)
		join = append(join, fmt.Sprintf("%q", fmt.Sprintf("127.0.0.1:%d", p.rpc)))
	}
	var servers []*agent
	serverDirs := make([]string, 3)
	for i, p := range ps {
		prefix := "global-server-berth"
		if i > 0 {
			prefix = fmt.Sprintf("global-server-berth-%d", i)
		}
		serverDirs[i] = t.TempDir()
		s := newAgent(t, fmt.Sprintf("s%d", i+1), p, fmt.Sprintf(`
server {
  enabled          = true
  bootstrap_expect = 3
  retry_join       = [%s]
  retry_interval   = "1s"
}`, strings.Join(join, ", "))+tlsBlock(t, serverDirs[i], ca, pki.path(prefix+".pem"), pki.path(prefix+"-key.pem")))
		s.start()
		servers = append(servers, s)
	}
	clientBody := func(extra string) string {
		return fmt.Sprintf(`
client {
  enabled = true
  servers = [%s]
}
plugin "raw_exec" {
  config { enabled = true }
}
%s`, strings.Join(join, ", "), extra)
	}
	var clients []*agent
	for i, prefix := range []string{"global-client-berth", "global-client-berth-1"} {
		// The hostpath storage adapter runs on the first client only: the
		// volume's claim is there, the second client holds none.
		extra := ""
		if i == 0 {
			extra = "plugin \"hostpath\" {\n  type = \"csi\"\n}\n"
		}
		cl := newAgent(t, fmt.Sprintf("c%d", i+1), freePorts(t), clientBody(extra)+tlsBlock(t, t.TempDir(), ca, pki.path(prefix+".pem"), pki.path(prefix+"-key.pem")))
		t.Cleanup(func() { unmountUnder(t, cl.dir) })
		t.Cleanup(func() { killLeftoverTasks(cl) })
		cl.start()
		clients = append(clients, cl)
	}
	// The intruder: a client certificate of another CA, trusting its own
	// CA and ours (an agent's certificate must verify against its ca_file,
	// and ours lets it verify the servers), so only the servers' refusal
	// keeps it out.
	foreign := t.TempDir()
	berthIn(t, foreign, "tls", "ca", "create")
	berthIn(t, foreign, "tls", "cert", "create", "-client")
	bundle := filepath.Join(foreign, "bundle.pem")
	var both []byte
	for _, f := range []string{filepath.Join(foreign, "berth-agent-ca.pem"), ca} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		both = append(both, b...)
	}
	if err := os.WriteFile(bundle, both, 0o600); err != nil {
		t.Fatal(err)
	}
	intruder := newAgent(t, "intruder", freePorts(t), clientBody("")+
		tlsBlock(t, t.TempDir(), bundle, filepath.Join(foreign, "global-client-berth.pem"), filepath.Join(foreign, "global-client-berth-key.pem")))
	intruder.start()

	s := servers[0]
	cli := func(token string, args ...string) (string, error) { return pki.cli(s, token, args...) }
	must := func(token string, args ...string) string {
		t.Helper()
		out, err := cli(token, args...)
		if err != nil {
			t.Fatalf("berth %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	refused := func(want, token string, args ...string) {
		t.Helper()
		out, err := cli(token, args...)
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("berth %s: %v, want a refusal naming %q:\n%s", strings.Join(args, " "), err, want, out)
		}
	}

	// Bootstrap through the CLI over HTTPS, once every server took the
	// ACL gate.
	var boot struct {
		SecretID string `json:"secret_id"`
	}
	eventually(t, 60*time.Second, "acl bootstrap over HTTPS", func() error {
		out, err := cli("", "acl", "bootstrap", "-json")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return json.Unmarshal([]byte(out), &boot)
	})
	mgmt := boot.SecretID
	write := func(name, body string) string {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	policies := map[string]string{
		"readonly": "job { policy = \"read\" }\nnode { policy = \"read\" }\nvolume { policy = \"read\" }\n",
		"deployer": "job { policy = \"write\" }\n",
		"mounter":  "job {\n  capabilities = [\"submit-job\", \"read-job\", \"list-jobs\"]\n}\nvolume {\n  capabilities = [\"csi-mount-volume\"]\n}\n",
	}
	tokens := map[string]string{}
	for name, rules := range policies {
		must(mgmt, "acl", "policy", "apply", name, write(name+".hcl", rules))
		var tok struct {
			SecretID string `json:"secret_id"`
		}
		out := must(mgmt, "acl", "token", "create", "-name", name, "-policy", name, "-json")
		if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.SecretID == "" {
			t.Fatalf("token create %s: %v\n%s", name, err, out)
		}
		tokens[name] = tok.SecretID
	}

	// Both clients register over mutual TLS; the intruder never does.
	nodeIDs := map[string]string{}
	eventually(t, 60*time.Second, "c1 and c2 ready", func() error {
		var nodes []apiNode
		if err := pki.getJSON(s, tokens["readonly"], "/v1/nodes", &nodes); err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Status == "ready" {
				nodeIDs[n.Name] = n.ID
			}
		}
		if nodeIDs["c1"] == "" || nodeIDs["c2"] == "" {
			return fmt.Errorf("nodes %+v", nodes)
		}
		return nil
	})
	eventually(t, 30*time.Second, "the intruder's refused handshake in its log", func() error {
		b, err := os.ReadFile(intruder.logPath)
		if err != nil {
			return err
		}
		log := string(b)
		if !strings.Contains(log, "registering node") || !strings.Contains(log, "tls:") {
			return errors.New("no refused registration logged yet")
		}
		return nil
	})

	// A job mounting a CSI volume, run with the mounter's token.
	eventually(t, 60*time.Second, "volume svol created", func() error {
		out, err := cli(mgmt, "volume", "create", write("svol.hcl", `
id           = "svol"
plugin_id    = "hostpath"
capacity_min = "1MiB"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`))
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	dbJob := write("db.hcl", `
job "db" {
  group "db" {
    volume "data" {
      type            = "csi"
      source          = "svol"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "server" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > local/pid; echo secured > $BERTH_VOLUME_DATA/f; exec sleep 3600"]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
`)
	refused(`capability "submit-job" on job is required`, tokens["readonly"], "job", "run", "-detach", dbJob)
	refused(`capability "csi-mount-volume" on volume is required`, tokens["deployer"], "job", "run", "-detach", dbJob)
	must(tokens["mounter"], "job", "run", "-detach", dbJob)
	t.Cleanup(func() { _, _ = cli(mgmt, "job", "stop", "-purge", "db") })
	var claim apiClaim
	eventually(t, 60*time.Second, "db running on c1 with its claim", func() error {
		var allocs []apiAlloc
		if err := pki.getJSON(s, tokens["readonly"], "/v1/job/db/allocations", &allocs); err != nil {
			return err
		}
		if len(allocs) != 1 || allocs[0].ClientStatus != "running" {
			return fmt.Errorf("allocs %+v", allocs)
		}
		var v apiVolumeView
		if err := pki.getJSON(s, tokens["readonly"], "/v1/volume/csi/svol", &v); err != nil {
			return err
		}
		if len(v.Claims) != 1 || v.Claims[0].AllocID != allocs[0].ID || v.Claims[0].NodeID != nodeIDs["c1"] {
			return fmt.Errorf("claims %+v, want alloc %s's on c1", v.Claims, allocs[0].ID)
		}
		claim = v.Claims[0]
		return nil
	})

	// Node identity and roles, over gRPC with the second client's
	// certificate.
	store, err := tlsconf.New(tlsconf.Options{CAFile: ca, CertFile: pki.path("global-client-berth-1.pem"),
		KeyFile: pki.path("global-client-berth-1-key.pem"), VerifyServerHostname: true})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.rpcAddr, tlsconf.DialOptions(store)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = pb.NewOperatorClient(conn).Join(ctx, &pb.JoinRequest{Server: &pb.ServerMember{Id: "rogue", Name: "rogue", RpcAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2"}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Operator.Join with a client certificate: %v, want PermissionDenied", err)
	}
	if err := raftHangsUp(fmt.Sprintf("127.0.0.1:%d", ps[0].raft), store); err != nil {
		t.Fatal(err)
	}
	nodes := pb.NewNodesClient(conn)
	// A node registered before every server had recorded its version (the
	// node secrets gate) has no secret yet: it is issued one when a
	// heartbeat asks it to register again. Until then nothing is checked,
	// so the test waits until a made-up secret is refused for both.
	madeUp := strings.Repeat("0", 64)
	probed := time.Now()
	eventually(t, 60*time.Second, "c1 and c2 issued node secrets", func() error {
		for _, name := range []string{"c1", "c2"} {
			_, err := nodes.Heartbeat(rpc.WithNodeSecret(ctx, madeUp), &pb.NodeHeartbeatRequest{NodeId: nodeIDs[name]})
			if status.Code(err) != codes.PermissionDenied {
				return fmt.Errorf("%s's heartbeat with a made-up secret: %v", name, err)
			}
		}
		return nil
	})
	t.Logf("both nodes proved to have secrets %v after the first probe", time.Since(probed).Round(time.Millisecond))
	// The second client stops, so its secret can be read from its state DB.
	c2 := clients[1]
	c2.stop()
	db, err := state.Open(state.Path(filepath.Join(c2.dir, "data")))
	if err != nil {
		t.Fatal(err)
	}
	c2Secret, err := db.NodeSecret()
	db.Close()
	if err != nil || c2Secret == "" {
		t.Fatalf("c2's node secret: %q, %v", c2Secret, err)
	}
	// Back up, it registers again with the secret it keeps.
	c2.start()
	if _, err := nodes.Heartbeat(rpc.WithNodeSecret(ctx, c2Secret), &pb.NodeHeartbeatRequest{NodeId: nodeIDs["c2"]}); err != nil {
		t.Fatalf("c2's heartbeat with its own secret: %v (the secret read is not its own?)", err)
	}
	_, err = nodes.Heartbeat(rpc.WithNodeSecret(ctx, c2Secret), &pb.NodeHeartbeatRequest{NodeId: nodeIDs["c1"]})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a heartbeat of c1 with c2's secret: %v, want PermissionDenied", err)
	}
	claims := pb.NewClaimsClient(conn)
	_, err = claims.ClientClaim(rpc.WithNodeSecret(ctx, c2Secret), &pb.ClientClaimRequest{NodeId: nodeIDs["c2"], AllocId: claim.AllocID, VolumeId: "svol", ClaimId: claim.ID})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not on node "+nodeIDs["c2"]) {
		t.Fatalf("c2 reading the claim of c1's alloc: %v, want PermissionDenied: not on c2", err)
	}
	_, err = claims.ClientClaim(rpc.WithNodeSecret(ctx, c2Secret), &pb.ClientClaimRequest{NodeId: nodeIDs["c1"], AllocId: claim.AllocID, VolumeId: "svol", ClaimId: claim.ID})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("c2 reading c1's claim as c1: %v, want PermissionDenied", err)
	}

	// The stop frees the claim (the mounter may read its job).
	must(tokens["mounter"], "job", "stop", "db")
	eventually(t, 60*time.Second, "svol's claim freed", func() error {
		var v apiVolumeView
		if err := pki.getJSON(s, tokens["readonly"], "/v1/volume/csi/svol", &v); err != nil {
			return err
		}
		if len(v.Claims) != 0 || len(v.Attachments) != 0 {
			return fmt.Errorf("claims %+v, attachments %+v", v.Claims, v.Attachments)
		}
		return nil
	})
	noMountsUnder(t, "c1's data dir", filepath.Join(clients[0].dir, "data", "csi"))

	// The intruder never made it into the node list.
	var all []apiNode
	if err := pki.getJSON(s, tokens["readonly"], "/v1/nodes", &all); err != nil {
		t.Fatal(err)
	}
	for _, n := range all {
		if n.Name == "intruder" {
			t.Fatalf("the intruder is listed: %+v", all)
		}
	}

	// SIGHUP with a rotated certificate (same CA) on the first server.
	berthIn(t, pki.dir, "tls", "cert", "create", "-server")
	rotated := pki.path("global-server-berth-3.pem")
	copyInto(t, rotated, filepath.Join(serverDirs[0], "cert.pem"))
	copyInto(t, pki.path("global-server-berth-3-key.pem"), filepath.Join(serverDirs[0], "key.pem"))
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	want := certSerial(t, rotated)
	eventually(t, 30*time.Second, "s1 serving the rotated certificate", func() error {
		got, err := pki.servedSerial(s)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("serial %s, want %s", got, want)
		}
		return nil
	})
	web := write("web.hcl", `
job "after-reload" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo done"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
`)
	must(tokens["deployer"], "job", "run", "-detach", web)
	eventually(t, 60*time.Second, "the job after the reload complete", func() error {
		var allocs []apiAlloc
		if err := pki.getJSON(s, tokens["readonly"], "/v1/job/after-reload/allocations", &allocs); err != nil {
			return err
		}
		// (Should it land on c2 while c2 restarts, it may be lost and
		// replaced.)
		for _, a := range allocs {
			if a.ClientStatus == "complete" {
				return nil
			}
		}
		return fmt.Errorf("allocs %+v", allocs)
	})
}

// raftHangsUp dials raft's port with a client certificate: the handshake
// is refused, or the server hangs up at its first read (TLS 1.3 checks the
// client's certificate after the client's side of the handshake is done).
func raftHangsUp(addr string, s *tlsconf.Store) error {
	c, err := tls.Dial("tcp", addr, s.ClientConfig())
	if err != nil {
		return nil
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	_, err = io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("raft's port kept a client certificate's connection open")
	}
	return nil
}
