package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// serverClosed waits (up to 10 s) until the agent closed c.
func serverClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("connection not closed by the agent within 10s")
	}
}

// An agent enforces its limits block: the HTTP listener closes a client
// IP's connection past http_max_conns_per_client, the RPC listener closes
// a connection that sends nothing within rpc_handshake_timeout (the
// agent's own client keeps working), and a server refuses a gRPC request
// over max_request_bytes.
func TestAgentEnforcesItsLimits(t *testing.T) {
	cfg := DevConfig()
	cfg.Ports = Ports{}
	cfg.Limits = LimitsConfig{HTTPMaxConnsPerClient: 2, RPCMaxConnsPerClient: 20, RPCHandshakeTimeout: 300 * time.Millisecond, MaxRequestBytes: 1 << 20}
	a, err := New(cfg, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)

	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", a.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", a.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	serverClosed(t, extra)
	// The held ones still serve: a request on one of them is answered.
	if _, err := io.WriteString(held[0], "GET /v1/status/leader HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = held[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, _ := io.ReadAll(held[0])
	if !strings.HasPrefix(string(answer), "HTTP/1.1 200") {
		t.Fatalf("a held connection answered %q", answer)
	}

	rpcAddr := a.rpcAddrs[0]
	silent, err := net.Dial("tcp", rpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	serverClosed(t, silent)
	testutil.WaitFor(t, 20*time.Second, func() error {
		if !a.Client().Registered() {
			return errors.New("the agent's client is not registered")
		}
		return nil
	})

	pool := rpc.NewPool()
	defer pool.Close()
	conn, err := pool.Conn(rpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := &pb.Node{Id: "11111111-1111-4111-8111-111111111111", Name: "big", Meta: map[string]string{"pad": strings.Repeat("x", 2<<20)}}
	_, err = pb.NewNodesClient(conn).Register(ctx, &pb.NodeRegisterRequest{Node: big})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 2 MiB request to a 1 MiB server: %v, want ResourceExhausted", err)
	}
}
