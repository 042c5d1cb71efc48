package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/agent"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// tlsCluster is a CA and certificates made by `berth tls` in dir, and the
// agents started with them.
type tlsCluster struct {
	t   *testing.T
	dir string
}

// pki makes the cluster's CA, 3 server certificates, a client and a cli
// one with the CLI, in dir (the working directory from then on).
func newTLSCluster(t *testing.T) *tlsCluster {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	for _, argv := range [][]string{
		{"tls", "ca", "create"},
		{"tls", "cert", "create", "-server"},
		{"tls", "cert", "create", "-server"},
		{"tls", "cert", "create", "-server"},
		{"tls", "cert", "create", "-client"},
		{"tls", "cert", "create", "-cli"},
	} {
		if code, out, errOut := berth(t, argv...); code != 0 {
			t.Fatalf("berth %s: exit %d\n%s%s", strings.Join(argv, " "), code, out, errOut)
		}
	}
	return &tlsCluster{t: t, dir: dir}
}

func (tc *tlsCluster) path(name string) string { return filepath.Join(tc.dir, name) }

// startAgent starts an agent from an HCL file: its tls block names a copy
// of the certificate prefix (so a test can rotate one agent's), and body
// says what the agent runs.
func (tc *tlsCluster) startAgent(name, certPrefix, body string) *agent.Agent {
	t := tc.t
	t.Helper()
	own := filepath.Join(tc.dir, name)
	if err := os.MkdirAll(own, 0o700); err != nil {
		t.Fatal(err)
	}
	copyFile(t, tc.path(certPrefix+".pem"), filepath.Join(own, "cert.pem"))
	copyFile(t, tc.path(certPrefix+"-key.pem"), filepath.Join(own, "key.pem"))
	copyFile(t, tc.path("berth-agent-ca.pem"), filepath.Join(own, "ca.pem"))
	src := fmt.Sprintf(`name = %q
data_dir = %q
tls {
  ca_file   = %q
  cert_file = %q
  key_file  = %q
  rpc  = true
  http = true
  verify_server_hostname = true
  verify_https_client    = true
}
%s`, name, filepath.Join(own, "data"), filepath.Join(own, "ca.pem"), filepath.Join(own, "cert.pem"), filepath.Join(own, "key.pem"), body)
	file := filepath.Join(own, "agent.hcl")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile, err := agent.LoadConfigFiles([]string{file})
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.DefaultConfig().Merge(fromFile)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Ports = agent.Ports{} // free ports
	a, err := agent.New(cfg, testutil.Logger(t).Named(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	return a
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// store is a tlsconf.Store of the given files (a role's certificate and a
// CA bundle), for dialling the cluster as that role.
func store(t *testing.T, ca, cert, key string) *tlsconf.Store {
	t.Helper()
	s, err := tlsconf.New(tlsconf.Options{CAFile: ca, CertFile: cert, KeyFile: key, VerifyServerHostname: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func grpcConn(t *testing.T, addr string, s *tlsconf.Store) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, tlsconf.DialOptions(s)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestTLSCluster runs 3 servers and a client with mutual TLS everywhere
// (certificates made by `berth tls`): the cluster forms over TLS raft and
// runs a job, also one sent through a follower (forwarded to the leader);
// a certificate of another CA cannot register a node; a client
// certificate cannot join raft or call a server-only method; the HTTPS API
// refuses a request without a client certificate and serves the CLI with
// one; a reload of rotated certificates keeps the old connections and
// serves new ones with the new certificate.
func TestTLSCluster(t *testing.T) {
	tc := newTLSCluster(t)
	s1 := tc.startAgent("s1", "global-server-berth", "server {\n  enabled = true\n  bootstrap_expect = 1\n}\n")
	s1RPC := s1.Server().RPCAddr()
	servers := []*agent.Agent{s1}
	for i, prefix := range []string{"global-server-berth-1", "global-server-berth-2"} {
		servers = append(servers, tc.startAgent(fmt.Sprintf("s%d", i+2), prefix,
			fmt.Sprintf("server {\n  enabled = true\n  bootstrap_expect = 1\n  retry_join = [%q]\n}\n", s1RPC)))
	}
	var rpcAddrs []string
	for _, s := range servers {
		rpcAddrs = append(rpcAddrs, fmt.Sprintf("%q", s.Server().RPCAddr()))
	}
	client := tc.startAgent("c1", "global-client-berth", fmt.Sprintf(
		"client {\n  enabled = true\n  servers = [%s]\n}\nplugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n", strings.Join(rpcAddrs, ", ")))

	// The cluster forms over TLS raft: three voters, one leader.
	testutil.WaitFor(t, 30*time.Second, func() error {
		for _, s := range servers {
			f := s.Server().Raft().GetConfiguration()
			if err := f.Error(); err != nil {
				return err
			}
			if n := len(f.Configuration().Servers); n != 3 {
				return fmt.Errorf("%s sees %d raft servers", s.HTTPAddr(), n)
			}
			if _, id := s.Server().Raft().LeaderWithID(); id == "" {
				return errors.New("no leader")
			}
		}
		if !client.Client().Registered() {
			return errors.New("the client has not registered")
		}
		return nil
	})

	ca, cliCert, cliKey := tc.path("berth-agent-ca.pem"), tc.path("global-cli-berth.pem"), tc.path("global-cli-berth-key.pem")
	addr := s1.HTTPURL()
	if !strings.HasPrefix(addr, "https://") {
		t.Fatalf("HTTP API at %s, want https", addr)
	}

	// A job runs, submitted by the CLI over HTTPS with the cli certificate.
	job := &pb.Job{Id: "hello", Name: "hello", Type: pb.JobType_JOB_TYPE_BATCH, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "g", Count: 1, Tasks: []*pb.Task{{Name: "t", Driver: "raw_exec",
			Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/sh"), "args": sdk.ListValue("-c", "echo hello")}}}}}}
	tlsArgs := []string{"-address", addr, "-ca-cert", ca, "-client-cert", cliCert, "-client-key", cliKey}
	if code, out, errOut := berth(t, append(append([]string{"job", "run"}, tlsArgs...), writeJobFile(t, job))...); code != 0 {
		t.Fatalf("job run over HTTPS: exit %d\n%s%s", code, out, errOut)
	}
	apiClient, err := api.NewClientTLS(addr, api.TLSConfig{CACert: ca, ClientCert: cliCert, ClientKey: cliKey})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 60*time.Second, func() error {
		allocs, _, err := apiClient.Jobs().Allocations(context.Background(), "hello", nil)
		if err != nil {
			return err
		}
		if len(allocs) != 1 || allocs[0].GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE {
			return fmt.Errorf("allocs %v", allocs)
		}
		return nil
	})

	// A job sent through a follower's HTTPS: the follower forwards it to
	// the leader over RPC, where verify_server_hostname lets it in only
	// because the follower presents its server certificate.
	var follower *agent.Agent
	for _, s := range servers {
		if !s.Server().IsLeader() {
			follower = s
			break
		}
	}
	if follower == nil {
		t.Fatal("no follower")
	}
	fwdJob := proto.Clone(job).(*pb.Job)
	fwdJob.Id, fwdJob.Name = "forwarded", "forwarded"
	fwdArgs := []string{"-address", follower.HTTPURL(), "-ca-cert", ca, "-client-cert", cliCert, "-client-key", cliKey}
	if code, out, errOut := berth(t, append(append([]string{"job", "run"}, fwdArgs...), writeJobFile(t, fwdJob))...); code != 0 {
		t.Fatalf("job run through a follower's HTTPS: exit %d\n%s%s", code, out, errOut)
	}
	testutil.WaitFor(t, 60*time.Second, func() error {
		allocs, _, err := apiClient.Jobs().Allocations(context.Background(), "forwarded", nil)
		if err != nil {
			return err
		}
		if len(allocs) != 1 || allocs[0].GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE {
			return fmt.Errorf("allocs of the forwarded job %v", allocs)
		}
		return nil
	})

	// HTTPS with verify_https_client: no client certificate, no answer;
	// the CLI without -client-cert fails, with it (from the environment) succeeds.
	roots := x509.NewCertPool()
	caPEM, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(caPEM)
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	if resp, err := noCert.Get(addr + "/v1/nodes"); err == nil {
		resp.Body.Close()
		t.Fatalf("a request without a client certificate got HTTP %d", resp.StatusCode)
	}
	// (The refusal reads "certificate required", or a broken pipe when the
	// client wrote before the server's alert came.)
	if code, _, errOut := berth(t, "node", "status", "-address", addr, "-ca-cert", ca); code != 1 || !strings.Contains(errOut, addr) {
		t.Fatalf("node status without a client certificate: exit %d, %q", code, errOut)
	}
	t.Setenv(api.EnvCACert, ca)
	t.Setenv(api.EnvClientCert, cliCert)
	t.Setenv(api.EnvClientKey, cliKey)
	if code, out, errOut := berth(t, "node", "status", "-address", addr); code != 0 || !strings.Contains(out, client.Client().NodeID()[:8]) {
		t.Fatalf("node status with BERTH_CLIENT_CERT: exit %d\n%s%s", code, out, errOut)
	}

	// A node with a certificate of another CA cannot register, even trusting ours.
	foreignDir := t.TempDir()
	foreignCA, err := tlsconf.NewCA(tlsconf.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := tlsconf.NewCert(foreignCA, tlsconf.CertOptions{Role: tlsconf.RoleClient})
	if err != nil {
		t.Fatal(err)
	}
	bundle := append(append([]byte{}, foreignCA.Cert...), caPEM...)
	for name, data := range map[string][]byte{"ca.pem": bundle, "c.pem": foreign.Cert, "c-key.pem": foreign.Key} {
		if err := os.WriteFile(filepath.Join(foreignDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	intruder := store(t, filepath.Join(foreignDir, "ca.pem"), filepath.Join(foreignDir, "c.pem"), filepath.Join(foreignDir, "c-key.pem"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = pb.NewNodesClient(grpcConn(t, s1RPC, intruder)).Register(ctx, &pb.NodeRegisterRequest{Node: &pb.Node{Id: "intruder", Name: "intruder"}})
	if err == nil || status.Code(err) != codes.Unavailable {
		t.Fatalf("registering with a certificate of another CA: %v, want Unavailable (handshake refused)", err)
	}
	nodes, _, err := apiClient.Nodes(ctx, nil)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes after the intruder: %v, %v", nodes, err)
	}
	// Nor can anything without TLS.
	plain, err := grpc.NewClient(s1RPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := pb.NewStatusClient(plain).Ping(ctx, &pb.PingRequest{}); err == nil {
		t.Fatal("a plaintext call was answered")
	}

	// A client certificate: node RPCs yes, server-only ones no.
	clientStore := store(t, ca, tc.path("global-client-berth.pem"), tc.path("global-client-berth-key.pem"))
	conn := grpcConn(t, s1RPC, clientStore)
	if _, err := pb.NewNodesClient(conn).List(ctx, &pb.NodeListRequest{}); err != nil {
		t.Fatalf("a client certificate listing nodes: %v", err)
	}
	_, err = pb.NewOperatorClient(conn).Join(ctx, &pb.JoinRequest{Server: &pb.ServerMember{Id: "rogue", Name: "rogue", RpcAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2"}})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "server certificate") {
		t.Fatalf("Operator.Join with a client certificate: %v, want PermissionDenied", err)
	}
	_, err = pb.NewJobsClient(conn).List(rpc.MarkForwarded(ctx, "rogue"), &pb.JobListRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a forwarded call with a client certificate: %v, want PermissionDenied", err)
	}
	_, err = pb.NewTunnelPeersClient(conn).Locate(ctx, &pb.LocateNodeRequest{NodeId: "x"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("TunnelPeers.Locate with a client certificate: %v, want PermissionDenied", err)
	}
	// raft's port speaks TLS to a server certificate and hangs up on a client's.
	raftAddr := s1.Server().RaftAddr()
	peerStore := store(t, ca, tc.path("global-server-berth.pem"), tc.path("global-server-berth-key.pem"))
	if c, err := tls.Dial("tcp", raftAddr, peerStore.ClientConfig()); err != nil {
		t.Fatalf("raft port with a server certificate: %v", err)
	} else {
		c.Close()
	}
	if err := raftRefuses(raftAddr, clientStore); err != nil {
		t.Fatal(err)
	}

	// Reload: rotate s1's certificate; a connection made before keeps
	// working, a new one gets the new certificate, and the cluster still
	// takes writes.
	keep := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{mustPair(t, cliCert, cliKey)}}}}
	before := servedBy(t, keep, addr)
	if code, out, errOut := berth(t, "tls", "cert", "create", "-server"); code != 0 || !strings.Contains(out, "global-server-berth-3.pem") {
		t.Fatalf("tls cert create: exit %d\n%s%s", code, out, errOut)
	}
	copyFile(t, tc.path("global-server-berth-3.pem"), filepath.Join(tc.dir, "s1", "cert.pem"))
	copyFile(t, tc.path("global-server-berth-3-key.pem"), filepath.Join(tc.dir, "s1", "key.pem"))
	if err := s1.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if got := servedBy(t, keep, addr); got.Cmp(before) != 0 {
		t.Fatalf("the kept connection was replaced (serial %v, was %v)", got, before)
	}
	fresh := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{mustPair(t, cliCert, cliKey)}}}}
	if after := servedBy(t, fresh, addr); after.Cmp(before) == 0 || after.Cmp(readCert(t, tc.path("global-server-berth-3.pem")).SerialNumber) != 0 {
		t.Fatalf("a new connection got serial %v, want the new certificate's", after)
	}
	job.Id, job.Name = "again", "again"
	if code, out, errOut := berth(t, append(append([]string{"job", "run"}, tlsArgs...), writeJobFile(t, job))...); code != 0 {
		t.Fatalf("job run after the reload: exit %d\n%s%s", code, out, errOut)
	}
}

// raftRefuses dials raft's port with s and checks the server ends the
// handshake (it reads the peer's certificate at its first read).
func raftRefuses(addr string, s *tlsconf.Store) error {
	c, err := tls.Dial("tcp", addr, s.ClientConfig())
	if err != nil {
		return nil // refused during the handshake (TLS 1.2)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	_, err = io.ReadAll(c)
	var ne net.Error
	switch {
	case err == nil:
		return nil // closed
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("raft's port kept a client certificate's connection open")
	default:
		return nil // the server's alert
	}
}

func mustPair(t *testing.T, cert, key string) tls.Certificate {
	t.Helper()
	p, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// servedBy makes a request with hc and returns the serial of the
// certificate the agent answered with.
func servedBy(t *testing.T, hc *http.Client, addr string) *big.Int {
	t.Helper()
	resp, err := hc.Get(addr + "/v1/agent/self")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("GET /v1/agent/self: HTTP %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	return resp.TLS.PeerCertificates[0].SerialNumber
}
