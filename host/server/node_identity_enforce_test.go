package server

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

func withNodeIdentity(mode string) clusterOpt {
	return func(c *testConfig) { c.NodeIdentityEnforcement = mode }
}

// warnLog is a log output tests read while servers write.
type warnLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *warnLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *warnLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// withLogTo sends the servers' WARN and above to buf.
func withLogTo(buf *warnLog) clusterOpt {
	return func(c *testConfig) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: buf, Level: hclog.Warn})
	}
}

// unauthenticatedCalls reads berth_node_calls_unauthenticated_total.
func unauthenticatedCalls(t *testing.T) float64 {
	t.Helper()
	return testutil.MetricValue(t, "berth_node_calls_unauthenticated_total", nil, endpoints.NodeIdentityMetrics()...)
}

// registerSecretless stores n as a node without a secret, as a
// registration by an older client (or before the gate) left it.
func registerSecretless(t *testing.T, s *Server, n *pb.Node) {
	t.Helper()
	n.Status = pb.NodeStatus_NODE_STATUS_READY
	if _, err := s.raftApply(context.Background(), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n}); err != nil {
		t.Fatal(err)
	}
}

func nodeHasSecret(t *testing.T, nodes pb.NodesClient, id string) bool {
	t.Helper()
	got, err := nodes.Get(ctx10s(t), &pb.NodeGetRequest{NodeId: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.GetNode().GetSecretHash()) != 0 {
		t.Fatalf("API get shows %s's hash", id)
	}
	return got.GetNode().GetHasSecret()
}

// Warn (the default) admits a secretless node's registration and calls,
// counting each and logging the node once per 10 minutes; the API's
// has_secret tells the nodes apart, in get and list.
func TestNodeIdentityWarnLogsCountsAndAdmits(t *testing.T) {
	var logs warnLog
	tc := newTestCluster(t, 1, withVersion(version.Version), withLogTo(&logs))
	s := tc.waitLeader()
	waitNodeSecrets(t, s)
	conn, err := rawNodeConn(t).Conn(s.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	nodes := pb.NewNodesClient(conn)
	old, upgraded := workNode("old"), workNode("upgraded")
	warning := "node " + old.GetId() + " has no secret yet: calls for it are not authenticated"

	before := unauthenticatedCalls(t)
	if err := registerRaw(t, nodes, old, ""); err != nil {
		t.Fatalf("warn refused an older client's registration: %v", err)
	}
	for range 2 {
		if _, err := nodes.Heartbeat(ctx10s(t), &pb.NodeHeartbeatRequest{NodeId: old.GetId()}); err != nil {
			t.Fatalf("warn refused a secretless node's heartbeat: %v", err)
		}
	}
	if got := unauthenticatedCalls(t) - before; got != 3 {
		t.Fatalf("berth_node_calls_unauthenticated_total rose by %v, want 3", got)
	}
	if got := logs.count(warning); got != 1 {
		t.Fatalf("warning logged %d times for 3 calls within 10 minutes, want 1:\n%s", got, logs.b.String())
	}
	if !strings.Contains(logs.b.String(), `set node_identity_enforcement = "strict"`) {
		t.Fatalf("warning does not say what to do:\n%s", logs.b.String())
	}
	tc.clock.Advance(10 * time.Minute)
	if _, err := nodes.Heartbeat(ctx10s(t), &pb.NodeHeartbeatRequest{NodeId: old.GetId()}); err != nil {
		t.Fatal(err)
	}
	if got := logs.count(warning); got != 2 {
		t.Fatalf("warning logged %d times after 10 minutes, want 2", got)
	}

	secret := newSecret(t)
	before = unauthenticatedCalls(t)
	if err := registerRaw(t, nodes, upgraded, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Heartbeat(withSecret(t, secret), &pb.NodeHeartbeatRequest{NodeId: upgraded.GetId()}); err != nil {
		t.Fatal(err)
	}
	if got := unauthenticatedCalls(t) - before; got != 0 {
		t.Fatalf("a node with a secret counted %v unauthenticated calls", got)
	}
	if logs.count("node "+upgraded.GetId()+" has no secret") != 0 {
		t.Fatal("a node with a secret was warned about")
	}
	if nodeHasSecret(t, nodes, old.GetId()) || !nodeHasSecret(t, nodes, upgraded.GetId()) {
		t.Fatal("has_secret wrong in node get")
	}
	list, err := nodes.List(ctx10s(t), &pb.NodeListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list.GetNodes() {
		if n.GetHasSecret() != (n.GetId() == upgraded.GetId()) || len(n.GetSecretHash()) != 0 {
			t.Fatalf("node list: %s has_secret=%v hash=%x", n.GetId(), n.GetHasSecret(), n.GetSecretHash())
		}
	}
}

// Strict refuses a secretless node's calls and registrations, admits a
// brand-new node's adopting registration, and a re-admitted node's
// exactly once (its heartbeat asking it to register again).
func TestNodeIdentityStrict(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version), withNodeIdentity("strict"))
	s := tc.waitLeader()
	waitNodeSecrets(t, s)
	conn, err := rawNodeConn(t).Conn(s.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	nodes, ops := pb.NewNodesClient(conn), pb.NewNodeOpsClient(conn)
	fresh, old := workNode("fresh"), workNode("old")
	refused := endpoints.ErrNodeUnauthenticated.Error()

	err = registerRaw(t, nodes, fresh, "")
	wantCode(t, "a new node's registration without a secret", err, codes.PermissionDenied, fresh.GetId(), refused, "upgrade the client")
	freshSecret := newSecret(t)
	if err := registerRaw(t, nodes, fresh, freshSecret); err != nil {
		t.Fatalf("strict refused a brand-new node's adopting registration: %v", err)
	}
	if _, err := nodes.Heartbeat(withSecret(t, freshSecret), &pb.NodeHeartbeatRequest{NodeId: fresh.GetId()}); err != nil {
		t.Fatal(err)
	}

	registerSecretless(t, s, old)
	attacker, real := newSecret(t), newSecret(t)
	for _, secret := range []string{"", attacker} {
		_, err = nodes.Heartbeat(withSecret(t, secret), &pb.NodeHeartbeatRequest{NodeId: old.GetId()})
		wantCode(t, "a secretless node's heartbeat", err, codes.PermissionDenied, old.GetId(), refused, "berth node readmit "+old.GetId())
		_, err = pb.NewClientAllocsClient(conn).Update(withSecret(t, secret), &pb.ClientAllocUpdateRequest{NodeId: old.GetId()})
		wantCode(t, "a secretless node's alloc update", err, codes.PermissionDenied, old.GetId(), refused)
	}
	err = registerRaw(t, nodes, old, attacker)
	wantCode(t, "adopting a secret for an existing secretless node", err, codes.PermissionDenied, old.GetId(), refused, "berth node readmit "+old.GetId())
	if n, _ := s.State().NodeByID(nil, old.GetId()); len(n.GetSecretHash()) != 0 {
		t.Fatal("a refused registration stored a secret")
	}

	if _, err := ops.Readmit(ctx10s(t), &pb.NodeReadmitRequest{NodeId: old.GetId()}); err != nil {
		t.Fatal(err)
	}
	hb, err := nodes.Heartbeat(withSecret(t, real), &pb.NodeHeartbeatRequest{NodeId: old.GetId()})
	if err != nil || !hb.GetRegisterAgain() {
		t.Fatalf("a readmitted node's heartbeat: %v, register_again=%v; want admitted, asked to register again", err, hb.GetRegisterAgain())
	}
	_, err = pb.NewClientAllocsClient(conn).Update(withSecret(t, real), &pb.ClientAllocUpdateRequest{NodeId: old.GetId()})
	wantCode(t, "a readmitted node's other calls", err, codes.PermissionDenied, old.GetId(), refused)
	if err := registerRaw(t, nodes, old, real); err != nil {
		t.Fatalf("strict refused a readmitted node's adopting registration: %v", err)
	}
	n, _ := s.State().NodeByID(nil, old.GetId())
	if !bytes.Equal(n.GetSecretHash(), endpoints.HashNodeSecret(real)) || n.GetReadmitted() {
		t.Fatalf("after adoption: hash %x readmitted=%v", n.GetSecretHash(), n.GetReadmitted())
	}
	err = registerRaw(t, nodes, old, attacker)
	wantCode(t, "a second adoption after one readmit", err, codes.PermissionDenied, old.GetId())
	if err := registerRaw(t, nodes, old, real); err != nil {
		t.Fatalf("the adopted secret's registration: %v", err)
	}
	if _, err := nodes.Heartbeat(withSecret(t, real), &pb.NodeHeartbeatRequest{NodeId: old.GetId()}); err != nil {
		t.Fatal(err)
	}
}
