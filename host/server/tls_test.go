package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// TestServerOnlyMethods pins which calls need a server certificate under
// verify_server_hostname: the servers' own services and joins, and any
// forwarded request; a node's and an API user's calls do not.
func TestServerOnlyMethods(t *testing.T) {
	plain := context.Background()
	for _, m := range []string{
		pb.Operator_Join_FullMethodName,
		pb.TunnelPeers_Locate_FullMethodName, pb.TunnelPeers_Release_FullMethodName,
		pb.CSIRelay_ControllerCall_FullMethodName, pb.CSIRelay_NodeDetachVolume_FullMethodName, pb.CSIRelay_NodeExpandVolume_FullMethodName,
	} {
		if !isServerOnly(plain, m) {
			t.Errorf("%s is not server-only", m)
		}
	}
	clientFacing := []string{
		pb.Nodes_Register_FullMethodName, pb.Nodes_Heartbeat_FullMethodName, pb.ClientAllocs_Watch_FullMethodName,
		pb.ClientAllocs_Update_FullMethodName, pb.Tunnel_Open_FullMethodName, pb.CSIPlugins_UpdateNode_FullMethodName,
		pb.Jobs_Register_FullMethodName, pb.Operator_RemovePeer_FullMethodName, pb.Status_Ping_FullMethodName,
		pb.ClientProxy_Logs_FullMethodName,
	}
	for _, m := range clientFacing {
		if isServerOnly(plain, m) {
			t.Errorf("%s is server-only, but nodes and the HTTP API call it", m)
		}
	}
	// The same calls, marked as forwarded by a server, are server-only.
	fwd := metadata.NewIncomingContext(plain, metadata.Pairs(rpc.ForwardedHeader, "s1"))
	for _, m := range slices.Concat(clientFacing, []string{pb.Jobs_List_FullMethodName}) {
		if !isServerOnly(fwd, m) {
			t.Errorf("a forwarded %s is not server-only", m)
		}
	}
}

// pkiStore writes a CA and a certificate of role to a temp dir and loads
// them with verify_server_hostname.
func pkiStore(t *testing.T, ca tlsconf.PEM, role tlsconf.Role) *tlsconf.Store {
	t.Helper()
	c, err := tlsconf.NewCert(ca, tlsconf.CertOptions{Role: role})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{"ca.pem": ca.Cert, "c.pem": c.Cert, "k.pem": c.Key}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err := tlsconf.New(tlsconf.Options{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "c.pem"),
		KeyFile: filepath.Join(dir, "k.pem"), VerifyServerHostname: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTLSStreamLayer: raft's TLS stream layer carries bytes between two
// servers, hangs up on a client certificate, and closes a connection that
// never completes its handshake.
func TestTLSStreamLayer(t *testing.T) {
	ca, err := tlsconf.NewCA(tlsconf.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv, other, client := pkiStore(t, ca, tlsconf.RoleServer), pkiStore(t, ca, tlsconf.RoleServer), pkiStore(t, ca, tlsconf.RoleClient)
	sl, err := NewTLSStreamLayer("127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	layer := sl.(*tlsStreamLayer)
	layer.handshakeTimeout = 200 * time.Millisecond
	defer layer.Close()
	accepted := make(chan error, 1)
	serveOne := func() {
		c, err := layer.Accept()
		if err != nil {
			accepted <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			accepted <- err
			return
		}
		_, err = c.Write(buf)
		accepted <- err
	}

	// Server to server: bytes go both ways.
	go serveOne()
	peer, err := NewTLSStreamLayer("127.0.0.1:0", other)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := peer.Dial(raft.ServerAddress(layer.Addr().String()), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q, %v", buf, err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatalf("server side: %v", err)
	}

	// A client certificate: the server side's handshake fails.
	go serveOne()
	cc, err := tls.Dial("tcp", layer.Addr().String(), client.ClientConfig())
	if err == nil {
		_, _ = cc.Write([]byte("ping"))
		defer cc.Close()
	}
	if err := <-accepted; !errors.Is(err, tlsconf.ErrPeerRole) {
		t.Fatalf("a client certificate on raft's port: server side %v, want ErrPeerRole", err)
	}

	// A peer that connects and says nothing is cut off after the timeout.
	go serveOne()
	raw, err := net.Dial("tcp", layer.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	select {
	case err := <-accepted:
		if err == nil {
			t.Fatal("a silent peer's connection was served")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a silent peer's connection is still open")
	}
}

// TestPingFromNeedsServerCertificate: under verify_server_hostname a
// Ping's From is observed only from a caller with a server certificate; a
// client certificate's claim leaves discovery as it was.
func TestPingFromNeedsServerCertificate(t *testing.T) {
	ca, err := tlsconf.NewCA(tlsconf.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srvStore := pkiStore(t, ca, tlsconf.RoleServer)
	tc := newTestCluster(t, 1, func(c *testConfig) { c.TLS = srvStore })
	s := tc.servers[0]
	ping := func(as *tlsconf.Store, from *pb.ServerMember) {
		t.Helper()
		conn, err := grpc.NewClient(s.cfg.RPCAddr, tlsconf.DialOptions(as)...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := pb.NewStatusClient(conn).Ping(context.Background(), &pb.PingRequest{From: from}); err != nil {
			t.Fatalf("ping: %v", err)
		}
	}
	before := s.discovery.knownIDs()
	for _, role := range []tlsconf.Role{tlsconf.RoleClient, tlsconf.RoleCLI} {
		ping(pkiStore(t, ca, role), &pb.ServerMember{Id: "forged-" + string(role), RpcAddr: "127.0.0.1:1"})
		if got := s.discovery.knownIDs(); !slices.Equal(got, before) {
			t.Fatalf("a %s certificate's Ping changed discovery: %v, was %v", role, got, before)
		}
	}
	ping(pkiStore(t, ca, tlsconf.RoleServer), &pb.ServerMember{Id: "peer", RpcAddr: "127.0.0.1:2"})
	if s.discovery.knownByID("peer") == nil {
		t.Fatalf("a server certificate's Ping was not observed: %v", s.discovery.knownIDs())
	}
}
