package client

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/host/client/state"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// logBuffer is an hclog output a test reads while the client writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func openStateDB(t *testing.T, dir string) *state.DB {
	t.Helper()
	db, err := state.Open(state.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// The secret the servers issue is kept in the state DB: a restarted
// client presents it and keeps working (registers and heartbeats as the
// same node, whose stored hash is unchanged). A client whose state DB was
// wiped is refused, says so in its log with the command that re-admits
// it, and after `node readmit` is issued a new secret and registers.
func TestClientKeepsItsSecretAcrossRestarts(t *testing.T) {
	s := startServer(t)
	addr := serverRPC(t, s)
	dir := t.TempDir()
	db := openStateDB(t, dir)
	c, err := New(Config{DataDir: dir, NodeName: "worker-1", Servers: []string{addr}, Identity: db,
		Logger: testutil.Logger(t).Named("client")})
	if err != nil {
		t.Fatal(err)
	}
	n := waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	secret, err := db.NodeSecret()
	if err != nil || secret == "" {
		t.Fatalf("stored secret %q, %v", secret, err)
	}
	if !bytes.Equal(n.GetSecretHash(), endpoints.HashNodeSecret(secret)) {
		t.Fatal("the stored secret is not the one the servers hold the hash of")
	}
	c.Shutdown()
	waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_DOWN)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openStateDB(t, dir)
	c2, err := New(Config{DataDir: dir, NodeName: "worker-1", Servers: []string{addr}, Identity: db,
		Logger: testutil.Logger(t).Named("client2")})
	if err != nil {
		t.Fatal(err)
	}
	back := waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	since := time.Now()
	testutil.WaitFor(t, 15*time.Second, func() error {
		if last := c2.lastContact(); !last.at.After(since) {
			return fmt.Errorf("no heartbeat since the restart")
		}
		return nil
	})
	if !bytes.Equal(back.GetSecretHash(), n.GetSecretHash()) || back.GetCreateIndex() != n.GetCreateIndex() {
		t.Fatal("the restarted client was issued a new secret, or made a new node")
	}
	c2.Shutdown()
	waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_DOWN)

	// Wiped: a new state DB, the same node ID (its file in the data dir).
	wiped := t.TempDir()
	logs := &logBuffer{}
	c3, err := New(Config{DataDir: dir, NodeName: "worker-1", Servers: []string{addr}, Identity: openStateDB(t, wiped),
		Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Warn})})
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Shutdown()
	want := "berth node readmit " + c.NodeID()
	testutil.WaitFor(t, 15*time.Second, func() error {
		if !strings.Contains(logs.String(), want) {
			return fmt.Errorf("the client's log does not say %q yet", want)
		}
		return nil
	})
	if c3.Registered() {
		t.Fatal("the wiped client registered")
	}
	pool := rpc.NewPool()
	defer pool.Close()
	conn, err := pool.Conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pb.NewNodeOpsClient(conn).Readmit(ctx, &pb.NodeReadmitRequest{NodeId: c.NodeID()}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, func() error {
		n, err := s.State().NodeByID(nil, c.NodeID())
		if err != nil {
			return err
		}
		if n.GetStatus() != pb.NodeStatus_NODE_STATUS_READY || len(n.GetSecretHash()) == 0 || bytes.Equal(n.GetSecretHash(), back.GetSecretHash()) {
			return fmt.Errorf("node %s not re-admitted yet: %v", c.NodeID(), n.GetStatus())
		}
		return nil
	})
}

// memSecrets is a NodeSecretStore in memory, shared by the clients a test
// restarts on one data dir.
type memSecrets struct {
	mu     sync.Mutex
	secret string
}

func (m *memSecrets) NodeSecret() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.secret, nil
}

func (m *memSecrets) PutNodeSecret(s string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.secret = s
	return nil
}

// A running node that is re-admitted (its hash cleared) is asked by its
// next heartbeat to register again, and is admitted again with the secret
// it keeps, without stopping: as a node that registered before every
// server knew node identities is once they do.
func TestRunningClientIsReadmittedWithItsSecret(t *testing.T) {
	s := startServer(t)
	addr := serverRPC(t, s)
	dir := t.TempDir()
	db := openStateDB(t, dir)
	c, err := New(Config{DataDir: dir, NodeName: "worker-1", Servers: []string{addr}, Identity: db,
		Logger: testutil.Logger(t).Named("client")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	n := waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	secret, _ := db.NodeSecret()
	if secret == "" || !bytes.Equal(n.GetSecretHash(), endpoints.HashNodeSecret(secret)) {
		t.Fatal("the node's hash is not its stored secret's")
	}
	pool := rpc.NewPool()
	defer pool.Close()
	conn, err := pool.Conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pb.NewNodeOpsClient(conn).Readmit(ctx, &pb.NodeReadmitRequest{NodeId: c.NodeID()}); err != nil {
		t.Fatal(err)
	}
	cleared, _ := s.State().NodeByID(nil, c.NodeID())
	if len(cleared.GetSecretHash()) != 0 {
		t.Fatal("readmit left the hash")
	}
	testutil.WaitFor(t, 30*time.Second, func() error {
		now, err := s.State().NodeByID(nil, c.NodeID())
		if err != nil {
			return err
		}
		if !bytes.Equal(now.GetSecretHash(), endpoints.HashNodeSecret(secret)) {
			return fmt.Errorf("not registered again with its secret yet")
		}
		if now.GetStatus() != pb.NodeStatus_NODE_STATUS_READY || now.GetCreateIndex() != n.GetCreateIndex() {
			return fmt.Errorf("node %v", now.GetStatus())
		}
		return nil
	})
}
