package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// rawNodeConn is a connection that sends exactly the secret each call's
// context carries (withSecret), unlike the tests' node pool.
func rawNodeConn(t *testing.T) *rpc.Pool {
	t.Helper()
	p := rpc.NewPool()
	t.Cleanup(p.Close)
	return p
}

// waitNodeSecrets waits until s knows every server is at the node-secret
// gate (until then registrations are issued no secret).
func waitNodeSecrets(t *testing.T, s *Server) {
	t.Helper()
	gate := versions.MustConstraint(">= " + endpoints.NodeSecretsSinceVersion)
	testutil.WaitFor(t, 10*time.Second, func() error {
		return s.requireServersAt(gate, endpoints.NodeSecretsSinceVersion, "node secrets")
	})
}

func withSecret(t *testing.T, secret string) context.Context {
	return rpc.WithNodeSecret(ctx10s(t), secret)
}

// registerRaw registers n presenting secret ("" none) and checks that the
// servers issue no secret (they never do: a client makes its own).
func registerRaw(t *testing.T, nodes pb.NodesClient, n *pb.Node, secret string) error {
	t.Helper()
	resp, err := throughLeaderChanges(t, func() (*pb.NodeRegisterResponse, error) {
		return nodes.Register(withSecret(t, secret), &pb.NodeRegisterRequest{Node: n})
	})
	if issued := resp.GetNodeSecret(); issued != "" {
		t.Fatalf("registration of %s was issued a secret", n.GetId())
	}
	return err
}

// newSecret is a client-made node secret.
func newSecret(t *testing.T) string {
	t.Helper()
	secret, err := rpc.NewNodeSecret()
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// The first registration admits the 256-bit secret the client presents,
// whose SHA-256 alone is stored; API reads never show it; a node's calls
// need its secret, and a node presenting another node's ID with its own
// secret is refused with PermissionDenied naming the node and not echoing
// the secret.
func TestNodeSecretAdmittedAndRequired(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version))
	s := tc.waitLeader()
	waitNodeSecrets(t, s)
	pool := rawNodeConn(t)
	conn, err := pool.Conn(s.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	nodes := pb.NewNodesClient(conn)
	n1, n2 := workNode("n1"), workNode("n2")
	secret1, secret2 := newSecret(t), newSecret(t)
	if err := registerRaw(t, nodes, n1, secret1); err != nil {
		t.Fatal(err)
	}
	stored, _ := s.State().NodeByID(nil, n1.GetId())
	if !bytes.Equal(stored.GetSecretHash(), endpoints.HashNodeSecret(secret1)) || strings.Contains(string(stored.GetSecretHash()), secret1) {
		t.Fatalf("stored hash %x is not the secret's SHA-256", stored.GetSecretHash())
	}
	if err := registerRaw(t, nodes, n2, secret2); err != nil {
		t.Fatalf("n2's registration: %v", err)
	}

	got, err := nodes.Get(ctx10s(t), &pb.NodeGetRequest{NodeId: n1.GetId()})
	if err != nil || len(got.GetNode().GetSecretHash()) != 0 {
		t.Fatalf("API get shows the hash: %v, %v", got.GetNode(), err)
	}
	list, err := nodes.List(ctx10s(t), &pb.NodeListRequest{})
	if err != nil || len(list.GetNodes()) != 2 {
		t.Fatalf("list: %v, %v", list, err)
	}
	for _, n := range list.GetNodes() {
		if len(n.GetSecretHash()) != 0 {
			t.Fatalf("API list shows %s's hash", n.GetId())
		}
	}

	if _, err := nodes.Heartbeat(withSecret(t, secret1), &pb.NodeHeartbeatRequest{NodeId: n1.GetId()}); err != nil {
		t.Fatalf("heartbeat with the node's secret: %v", err)
	}
	_, err = nodes.Heartbeat(ctx10s(t), &pb.NodeHeartbeatRequest{NodeId: n1.GetId()})
	wantCode(t, "heartbeat without a secret", err, codes.PermissionDenied, n1.GetId(), "no node secret")
	_, err = nodes.Heartbeat(withSecret(t, secret2), &pb.NodeHeartbeatRequest{NodeId: n1.GetId()})
	wantCode(t, "heartbeat as n1 with n2's secret", err, codes.PermissionDenied, n1.GetId(), "not node "+n1.GetId()+"'s")
	if strings.Contains(err.Error(), secret2) || strings.Contains(err.Error(), secret1) {
		t.Fatalf("the refusal echoes a secret: %v", err)
	}
	if !strings.Contains(err.Error(), endpoints.ErrNodeSecret.Error()) {
		t.Fatalf("refusal %v is not ErrNodeSecret", err)
	}
	// Every node call: alloc watch and updates, claim reads and reports,
	// CSI plugin updates.
	as := withSecret(t, secret2)
	_, err = pb.NewClientAllocsClient(conn).Watch(as, &pb.ClientAllocsRequest{NodeId: n1.GetId()})
	wantCode(t, "watch as n1", err, codes.PermissionDenied, n1.GetId())
	_, err = pb.NewClientAllocsClient(conn).Update(as, &pb.ClientAllocUpdateRequest{NodeId: n1.GetId()})
	wantCode(t, "alloc update as n1", err, codes.PermissionDenied, n1.GetId())
	_, err = pb.NewClaimsClient(conn).ClientClaims(as, &pb.ClientClaimsRequest{NodeId: n1.GetId()})
	wantCode(t, "claims read as n1", err, codes.PermissionDenied, n1.GetId())
	_, err = pb.NewClaimsClient(conn).ClientClaim(as, &pb.ClientClaimRequest{NodeId: n1.GetId(), ClaimId: "c"})
	wantCode(t, "claim read as n1", err, codes.PermissionDenied, n1.GetId())
	_, err = pb.NewClaimsClient(conn).ClientClaimUpdate(as, &pb.ClientClaimUpdateRequest{NodeId: n1.GetId(), ClaimId: "c"})
	wantCode(t, "claim report as n1", err, codes.PermissionDenied, n1.GetId())
	_, err = pb.NewCSIPluginsClient(conn).UpdateNode(as, &pb.NodeCSIUpdateRequest{NodeId: n1.GetId()})
	wantCode(t, "CSI update as n1", err, codes.PermissionDenied, n1.GetId())
	if _, err := pb.NewClientAllocsClient(conn).Watch(withSecret(t, secret1), &pb.ClientAllocsRequest{NodeId: n1.GetId()}); err != nil {
		t.Fatalf("watch with n1's secret: %v", err)
	}

	// The tunnel: n2's secret opens no tunnel for n1.
	tctx := metadata.AppendToOutgoingContext(as, tunnel.NodeIDHeader, n1.GetId())
	st, err := pb.NewTunnelClient(conn).Open(tctx)
	if err == nil {
		_, err = st.Recv()
	}
	wantCode(t, "tunnel as n1", err, codes.PermissionDenied, n1.GetId())
}

// A node whose state was wiped (no secret, same ID) is refused with the
// command that re-admits it; `node readmit` clears the stored hash by a
// raft command, after which the node's new secret is admitted and the old
// one no longer works.
func TestWipedNodeRefusedUntilReadmitted(t *testing.T) {
	tc := newTestCluster(t, 3, withVersion(version.Version))
	s := tc.waitLeader()
	waitNodeSecrets(t, s)
	follower := tc.followers(s)[0]
	pool := rawNodeConn(t)
	conn, err := pool.Conn(follower.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	nodes := pb.NewNodesClient(conn)
	n := workNode("n1")
	old := newSecret(t)
	if err := registerRaw(t, nodes, n, old); err != nil {
		t.Fatalf("first registration: %v", err)
	}
	if err := registerRaw(t, nodes, n, old); err != nil {
		t.Fatalf("registration with the secret: %v", err)
	}
	err = registerRaw(t, nodes, n, "")
	wantCode(t, "registration without the secret", err, codes.PermissionDenied, n.GetId(), "berth node readmit "+n.GetId())
	err = registerRaw(t, nodes, n, strings.Repeat("0", 64))
	wantCode(t, "registration with a wrong secret", err, codes.PermissionDenied, n.GetId(), "berth node readmit "+n.GetId())

	if _, err := throughLeaderChanges(t, func() (*pb.NodeOpResponse, error) {
		return pb.NewNodeOpsClient(conn).Readmit(ctx10s(t), &pb.NodeReadmitRequest{NodeId: n.GetId()})
	}); err != nil {
		t.Fatal(err)
	}
	// A heartbeat of the re-admitted node (no secret to check) is asked
	// to register again, to have its secret admitted.
	hb, err := throughLeaderChanges(t, func() (*pb.NodeHeartbeatResponse, error) {
		return nodes.Heartbeat(withSecret(t, old), &pb.NodeHeartbeatRequest{NodeId: n.GetId()})
	})
	if err != nil || !hb.GetRegisterAgain() {
		t.Fatalf("heartbeat after readmit: %v, %v; want register_again", hb, err)
	}
	_, err = pb.NewNodeOpsClient(conn).Readmit(ctx10s(t), &pb.NodeReadmitRequest{NodeId: "no-such-node"})
	wantCode(t, "readmit of an unknown node", err, codes.NotFound, "no-such-node")
	fresh := newSecret(t)
	if err := registerRaw(t, nodes, n, fresh); err != nil {
		t.Fatalf("registration after readmit: %v", err)
	}
	_, err = throughLeaderChanges(t, func() (*pb.NodeHeartbeatResponse, error) {
		return nodes.Heartbeat(withSecret(t, old), &pb.NodeHeartbeatRequest{NodeId: n.GetId()})
	})
	wantCode(t, "heartbeat with the old secret", err, codes.PermissionDenied, n.GetId())
	if hb, err := throughLeaderChanges(t, func() (*pb.NodeHeartbeatResponse, error) {
		return nodes.Heartbeat(withSecret(t, fresh), &pb.NodeHeartbeatRequest{NodeId: n.GetId()})
	}); err != nil || hb.GetRegisterAgain() {
		t.Fatalf("heartbeat with the new secret: %v, %v", hb, err)
	}
	// Every server holds the new hash (replicated), and reads on any of
	// them take the new secret.
	for _, srv := range tc.servers {
		testutil.WaitFor(t, 10*time.Second, func() error {
			return endpoints.CheckNodeSecret(srv.State(), n.GetId(), fresh)
		})
		c, err := pool.Conn(srv.cfg.RPCAddr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pb.NewClaimsClient(c).ClientClaims(withSecret(t, fresh), &pb.ClientClaimsRequest{NodeId: n.GetId()}); err != nil {
			t.Fatalf("%s: claims read with the new secret: %v", srv.cfg.Name, err)
		}
	}
}

// A follower whose state is behind a readmit and the registration after
// it (its raft transport cut) does not refuse the new secret: it sends the
// call to the leader, which holds the new hash.
func TestStaleFollowerForwardsANodeCallItWouldRefuse(t *testing.T) {
	tc := newTestCluster(t, 3, withVersion(version.Version))
	s := tc.waitLeader()
	waitNodeSecrets(t, s)
	lagging := tc.followers(s)[0]
	pool := rawNodeConn(t)
	leaderConn, err := pool.Conn(s.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	n := workNode("n1")
	if err := registerRaw(t, pb.NewNodesClient(leaderConn), n, newSecret(t)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if got, _ := lagging.State().NodeByID(nil, n.GetId()); len(got.GetSecretHash()) == 0 {
			return fmt.Errorf("%s has no hash of node %s yet", lagging.cfg.Name, n.GetId())
		}
		return nil
	})
	tc.partition(lagging)
	defer tc.heal(lagging)
	if _, err := pb.NewNodeOpsClient(leaderConn).Readmit(ctx10s(t), &pb.NodeReadmitRequest{NodeId: n.GetId()}); err != nil {
		t.Fatal(err)
	}
	fresh := newSecret(t)
	if err := registerRaw(t, pb.NewNodesClient(leaderConn), n, fresh); err != nil {
		t.Fatalf("registration after readmit: %v", err)
	}
	if endpoints.CheckNodeSecret(lagging.State(), n.GetId(), fresh) == nil {
		t.Fatal("the lagging follower already has the new hash: the test proves nothing")
	}
	c, err := pool.Conn(lagging.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewClaimsClient(c).ClientClaims(withSecret(t, fresh), &pb.ClientClaimsRequest{NodeId: n.GetId()}); err != nil {
		t.Fatalf("claims read at the lagging follower: %v", err)
	}
}

// A volume's secrets go only to a node holding a claim on it, proven by
// that node's secret: n2 cannot read n1's claim by naming n1 (n1's secret
// is not its own) nor by naming itself (the claim is not its), n1 can;
// the API's volume read keeps them redacted.
func TestVolumeSecretsOnlyToTheClaimHolder(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	// The nodes registered before the server knew its own version may
	// hold no secret yet: registered again past the gate, they do.
	waitNodeSecrets(t, cc.s)
	for _, n := range []*pb.Node{cc.n1, cc.n2} {
		if _, err := cc.tc.register(cc.s, n); err != nil {
			t.Fatal(err)
		}
		stored, _ := cc.s.State().NodeByID(nil, n.GetId())
		if secret := testNodeSecret(n.GetId()); secret == "" || !bytes.Equal(stored.GetSecretHash(), endpoints.HashNodeSecret(secret)) {
			t.Fatalf("node %s holds no secret the test knows", n.GetId())
		}
	}
	cc.volume(t, "data", snw)
	a := cc.placeWithClaim(t, "web", cc.n1.GetId(), "data", false)
	pool := rawNodeConn(t)
	conn, err := pool.Conn(cc.s.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	claims := pb.NewClaimsClient(conn)
	s1, s2 := testNodeSecret(cc.n1.GetId()), testNodeSecret(cc.n2.GetId())
	req := &pb.ClientClaimRequest{NodeId: cc.n1.GetId(), AllocId: a, VolumeId: "data"}
	_, err = claims.ClientClaim(withSecret(t, s2), req)
	wantCode(t, "n2 naming n1", err, codes.PermissionDenied, cc.n1.GetId())
	_, err = claims.ClientClaim(ctx10s(t), req)
	wantCode(t, "no secret", err, codes.PermissionDenied, cc.n1.GetId())
	_, err = claims.ClientClaim(withSecret(t, s2), &pb.ClientClaimRequest{NodeId: cc.n2.GetId(), AllocId: a, VolumeId: "data"})
	wantCode(t, "n2 naming itself", err, codes.PermissionDenied, "not on node "+cc.n2.GetId())
	resp, err := claims.ClientClaim(withSecret(t, s1), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetVolume().GetSecrets()["token"]; got != "s3cr3t-data" {
		t.Fatalf("the claim holder gets secrets %v", resp.GetVolume().GetSecrets())
	}
	shown, err := pb.NewVolumesClient(conn).Get(ctx10s(t), &pb.VolumeGetRequest{VolumeId: "data"})
	if err != nil {
		t.Fatal(err)
	}
	if got := shown.GetVolume().GetVolume().GetSecrets()["token"]; got == "s3cr3t-data" || got == "" {
		t.Fatal("the API's volume read shows the secret")
	}
}

// While a server is older than the gate, nodes register as before: no
// secret is admitted, none is asked for, and readmit (a command the older
// server does not know) is refused with FailedPrecondition.
func TestNodeSecretsWaitForEveryServer(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion("0.1.0-dev.3"))
	s := tc.waitLeader()
	pool := rawNodeConn(t)
	conn, err := pool.Conn(s.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if m, err := s.State().ServerByID(nil, s.ID()); err != nil || m == nil {
			return fmt.Errorf("server not recorded yet")
		}
		return nil
	})
	nodes := pb.NewNodesClient(conn)
	n := workNode("n1")
	for _, secret := range []string{"", newSecret(t)} {
		if err := registerRaw(t, nodes, n, secret); err != nil {
			t.Fatalf("registration below the gate: %v", err)
		}
		if stored, _ := s.State().NodeByID(nil, n.GetId()); len(stored.GetSecretHash()) != 0 {
			t.Fatal("a hash is stored below the gate")
		}
	}
	if _, err := nodes.Heartbeat(ctx10s(t), &pb.NodeHeartbeatRequest{NodeId: n.GetId()}); err != nil {
		t.Fatalf("heartbeat without a secret below the gate: %v", err)
	}
	_, err = pb.NewNodeOpsClient(conn).Readmit(ctx10s(t), &pb.NodeReadmitRequest{NodeId: n.GetId()})
	wantCode(t, "readmit below the gate", err, codes.FailedPrecondition, endpoints.NodeSecretsSinceVersion)
}

// A client makes its secret before its first registration: the servers
// adopt the one it presents for a node without one, so a
// registration retried after its answer was lost (the proposal committed)
// presents the same secret and is admitted. A malformed one is refused.
func TestRegistrationAdoptsTheClientsSecret(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version))
	s := tc.waitLeader()
	waitNodeSecrets(t, s)
	pool := rawNodeConn(t)
	conn, err := pool.Conn(s.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	nodes := pb.NewNodesClient(conn)
	mine := newSecret(t)
	n := workNode("n1")
	for range 2 {
		if err := registerRaw(t, nodes, n, mine); err != nil {
			t.Fatalf("registration presenting the client's secret: %v", err)
		}
	}
	stored, _ := s.State().NodeByID(nil, n.GetId())
	if !bytes.Equal(stored.GetSecretHash(), endpoints.HashNodeSecret(mine)) {
		t.Fatal("the stored hash is not the client's secret's")
	}
	err = registerRaw(t, nodes, workNode("n2"), "short")
	wantCode(t, "a malformed secret", err, codes.InvalidArgument, "n2", "64 lowercase hex digits")
}
