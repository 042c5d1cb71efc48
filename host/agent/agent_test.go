package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// testAgent starts a dev agent on free loopback ports.
func testAgent(t *testing.T) *Agent {
	t.Helper()
	cfg := DevConfig()
	// Port 0: each listener takes a free port and advertises it, so parallel
	// test packages never race for a port.
	cfg.Ports = Ports{}
	a, err := New(cfg, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	testutil.WaitFor(t, 20*time.Second, func() error {
		if !a.Client().Registered() {
			return fmt.Errorf("node not registered yet")
		}
		return nil
	})
	return a
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, a *Agent, method, path string, body io.Reader) reply {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+a.HTTPAddr()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

func (r reply) decode(t *testing.T, out any) {
	t.Helper()
	if err := json.Unmarshal(r.body, out); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

func (r reply) wantError(t *testing.T, status int, code, msgPart string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error content type %q", ct)
	}
	var e struct{ Code, Message string }
	r.decode(t, &e)
	if e.Code != code || !strings.Contains(e.Message, msgPart) {
		t.Fatalf("error %+v, want code %q with %q in the message", e, code, msgPart)
	}
}

func TestStatusEndpointsAnswerWithJSON(t *testing.T) {
	a := testAgent(t)
	var leader string
	do(t, a, "GET", "/v1/status/leader", nil).decode(t, &leader)
	if leader != a.rpcAddrs[0] {
		t.Fatalf("leader %q, want %q", leader, a.rpcAddrs[0])
	}
	var peers []string
	do(t, a, "GET", "/v1/status/peers", nil).decode(t, &peers)
	if len(peers) != 1 || peers[0] != leader {
		t.Fatalf("peers %v, want [%s]", peers, leader)
	}
	var self struct {
		Name   string
		Server struct {
			RaftState string `json:"raft_state"`
		}
		Client struct {
			NodeID     string `json:"node_id"`
			Registered bool
		}
	}
	do(t, a, "GET", "/v1/agent/self", nil).decode(t, &self)
	if self.Server.RaftState != "Leader" || self.Client.NodeID != a.Client().NodeID() || !self.Client.Registered {
		t.Fatalf("agent/self = %+v", self)
	}
	var members []struct {
		Status string
		Leader bool
	}
	do(t, a, "GET", "/v1/agent/members", nil).decode(t, &members)
	if len(members) != 1 || members[0].Status != "alive" || !members[0].Leader {
		t.Fatalf("members = %+v", members)
	}
}

func TestNodeEndpoints(t *testing.T) {
	a := testAgent(t)
	r := do(t, a, "GET", "/v1/nodes", nil)
	var nodes []struct {
		ID     string
		Status string
	}
	r.decode(t, &nodes)
	if len(nodes) != 1 || nodes[0].ID != a.Client().NodeID() || nodes[0].Status != "ready" {
		t.Fatalf("nodes = %+v", nodes)
	}
	index, err := strconv.ParseUint(r.header.Get(HeaderIndex), 10, 64)
	if err != nil || index == 0 {
		t.Fatalf("%s header = %q", HeaderIndex, r.header.Get(HeaderIndex))
	}
	if r.header.Get(HeaderKnownLeader) != "true" {
		t.Fatalf("%s = %q", HeaderKnownLeader, r.header.Get(HeaderKnownLeader))
	}

	var node struct{ ID, Name string }
	do(t, a, "GET", "/v1/node/"+a.Client().NodeID(), nil).decode(t, &node)
	if node.ID != a.Client().NodeID() || node.Name == "" {
		t.Fatalf("node = %+v", node)
	}
	do(t, a, "GET", "/v1/node/00000000-0000-4000-8000-000000000000", nil).wantError(t, 404, "not_found", "00000000-0000-4000-8000-000000000000")

	// A blocking query with nothing new returns when its wait ends, with the
	// same index. The client registers again once its drivers have
	// fingerprinted, which may land after the read above: a query that
	// returns early must have seen a newer index, and is asked again from
	// it (a few times at most).
	for attempt := 1; ; attempt++ {
		start := time.Now()
		r = do(t, a, "GET", fmt.Sprintf("/v1/nodes?index=%d&wait=150ms", index), nil)
		took := time.Since(start)
		got, err := strconv.ParseUint(r.header.Get(HeaderIndex), 10, 64)
		if r.status != 200 || err != nil {
			t.Fatalf("blocking query: status %d, %s %q", r.status, HeaderIndex, r.header.Get(HeaderIndex))
		}
		if got == index {
			if took < 150*time.Millisecond {
				t.Fatalf("blocking query with nothing new returned after %s", took)
			}
			break
		}
		if got < index || attempt == 5 {
			t.Fatalf("blocking query at index %d returned index %d after %s (attempt %d)", index, got, took, attempt)
		}
		index = got
	}
	// A consistent read is answered too (the dev agent is the leader).
	if r := do(t, a, "GET", "/v1/nodes?consistent", nil); r.status != 200 {
		t.Fatalf("consistent read: %d %s", r.status, r.body)
	}
}

func TestAPIErrorsAreJSONWithCodes(t *testing.T) {
	a := testAgent(t)
	do(t, a, "GET", "/v1/no/such/thing", nil).wantError(t, 404, "not_found", "GET /v1/no/such/thing")
	do(t, a, "POST", "/v1/nodes", nil).wantError(t, 405, "method_not_allowed", "POST")
	do(t, a, "GET", "/v1/nodes?index=-1", nil).wantError(t, 400, "invalid_argument", `index="-1"`)
	do(t, a, "GET", "/v1/nodes?wait=soon", nil).wantError(t, 400, "invalid_argument", `wait="soon"`)
	do(t, a, "GET", "/v1/nodes?stale=maybe", nil).wantError(t, 400, "invalid_argument", `stale="maybe"`)
	do(t, a, "GET", "/v1/nodes?consistent=no", nil).wantError(t, 400, "invalid_argument", `consistent="no"`)
	do(t, a, "DELETE", "/v1/operator/raft/peer", nil).wantError(t, 400, "invalid_argument", "peer")
	do(t, a, "DELETE", "/v1/operator/raft/peer?peer=ghost", nil).wantError(t, 404, "not_found", "ghost")
}

func TestSnapshotRestoreRefusesMalformedBodies(t *testing.T) {
	a := testAgent(t)
	// The dev agent settles first: its node's CSI plugin set reaches the
	// servers (registering the node again when the first send meets
	// servers whose versions are not yet recorded), so the state compared
	// below changes only through the restores.
	testutil.WaitFor(t, 20*time.Second, func() error {
		if r := do(t, a, "GET", "/v1/plugin/csi/hostpath", nil); r.status != 200 {
			return fmt.Errorf("hostpath plugin not on the servers yet: %d %s", r.status, r.body)
		}
		return nil
	})
	good := do(t, a, "GET", "/v1/operator/snapshot", nil)
	if good.status != 200 || len(good.body) < 64 {
		t.Fatalf("snapshot save: %d, %d bytes", good.status, len(good.body))
	}
	before := do(t, a, "GET", "/v1/nodes", nil)

	flipped := bytes.Clone(good.body)
	flipped[len(flipped)/2] ^= 0xff
	wrongMagic := bytes.Clone(good.body)
	copy(wrongMagic, "NOTASNAP")
	for name, body := range map[string][]byte{
		"empty":     nil,
		"garbage":   []byte("hello, world"),
		"truncated": good.body[:len(good.body)-10],
		"bit flip":  flipped,
		"magic":     wrongMagic,
	} {
		r := do(t, a, "PUT", "/v1/operator/snapshot", bytes.NewReader(body))
		r.wantError(t, 400, "invalid_argument", "invalid snapshot archive")
		_ = name
	}
	after := do(t, a, "GET", "/v1/nodes", nil)
	if !bytes.Equal(before.body, after.body) {
		t.Fatalf("state changed by refused restores:\nbefore %s\nafter  %s", before.body, after.body)
	}
	if r := do(t, a, "PUT", "/v1/operator/snapshot", bytes.NewReader(good.body)); r.status != 200 {
		t.Fatalf("restoring the good snapshot: %d %s", r.status, r.body)
	}
}

func TestMetricsArePrometheusText(t *testing.T) {
	a := testAgent(t)
	r := do(t, a, "GET", "/v1/metrics", nil)
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %q", r.status, r.header.Get("Content-Type"))
	}
	body := string(r.body)
	for _, want := range []string{
		`berth_raft_apply_count{command="NodeRegister"}`,
		`berth_fsm_apply_count{command="NodeRegister"}`,
		`berth_nodes{status="ready"} 1`,
		`berth_nodes{status="down"} 0`,
		"berth_raft_leader_changes",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// A dev agent's data dir is temporary: its raft state is kept in memory
// (no raft files), its client state DB skips fsync; an agent given a data
// dir keeps both on disk.
func TestDevAgentKeepsRaftInMemory(t *testing.T) {
	a := testAgent(t)
	if _, err := os.Stat(filepath.Join(a.DataDir(), "server", "raft")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dev agent's raft dir: %v, want none", err)
	}
	if a.state == nil || a.state.Synced() {
		t.Fatal("dev agent's client state DB is missing or fsyncs each commit")
	}

	cfg := DevConfig()
	cfg.Ports = Ports{}
	cfg.DataDir = t.TempDir()
	b, err := New(cfg, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "server", "raft", "raft.db")); err != nil {
		t.Fatalf("an agent with a data dir keeps no raft log on disk: %v", err)
	}
	if b.state == nil || !b.state.Synced() {
		t.Fatal("an agent with a data dir does not fsync its client state DB")
	}
}
