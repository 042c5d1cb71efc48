package server

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// A server that joins raft and has not recorded its version yet closes
// the node-secret gate; a node that has a secret is still admitted only
// presenting it, and keeps its hash: a registration without the secret is
// refused (ErrNodeSecretLost), one with it does not clear the hash. A node
// without a secret presenting one registers without it meanwhile.
func TestUnrecordedServerDoesNotBypassTheStoredSecret(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version))
	s := tc.waitLeader()
	waitNodeSecrets(t, s)
	conn, err := rawNodeConn(t).Conn(s.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	nodes := pb.NewNodesClient(conn)
	n := workNode("n1")
	secret := newSecret(t)
	if err := registerRaw(t, nodes, n, secret); err != nil {
		t.Fatal(err)
	}
	// A nonvoter that never answers: the gate stays closed, commits go on.
	if err := s.raft.AddNonvoter(raft.ServerID(uuid.Generate()), "127.0.0.1:1", 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	gate := versions.MustConstraint(">= " + endpoints.NodeSecretsSinceVersion)
	var below *endpoints.GateRefusal
	if err := s.requireServersAt(gate, endpoints.NodeSecretsSinceVersion, "node secrets"); !errors.As(err, &below) {
		t.Fatalf("gate with an unrecorded server: %v, want a GateRefusal", err)
	}
	hashKept := func(what string) {
		t.Helper()
		stored, _ := s.State().NodeByID(nil, n.GetId())
		if !bytes.Equal(stored.GetSecretHash(), endpoints.HashNodeSecret(secret)) {
			t.Fatalf("after %s the stored hash is %x, not the node's secret's", what, stored.GetSecretHash())
		}
	}
	err = registerRaw(t, nodes, n, "")
	wantCode(t, "registration without the secret, gate closed", err, codes.PermissionDenied, n.GetId(), "berth node readmit")
	hashKept("a registration without the secret")
	err = registerRaw(t, nodes, n, newSecret(t))
	wantCode(t, "registration with another secret, gate closed", err, codes.PermissionDenied, n.GetId())
	hashKept("a registration with another secret")
	if err := registerRaw(t, nodes, n, secret); err != nil {
		t.Fatalf("registration with the secret, gate closed: %v", err)
	}
	hashKept("a registration with the secret")
	_, err = nodes.Heartbeat(ctx10s(t), &pb.NodeHeartbeatRequest{NodeId: n.GetId()})
	wantCode(t, "heartbeat without the secret", err, codes.PermissionDenied, n.GetId())

	n2 := workNode("n2")
	if err := registerRaw(t, nodes, n2, newSecret(t)); err != nil {
		t.Fatalf("a new node presenting a secret, gate closed: %v", err)
	}
	if stored, _ := s.State().NodeByID(nil, n2.GetId()); len(stored.GetSecretHash()) != 0 {
		t.Fatal("a secret was admitted while a server had not recorded its version")
	}
}

// A client older than node identities presents no secret: it is issued
// none (it would not keep it), its node is stored without a hash, and its
// heartbeats and watches go on past the gate. Once upgraded it presents a
// secret, is asked to register again, and its secret is adopted; from then
// on its calls need it.
func TestOldClientKeepsWorkingAndIsAdoptedOnceUpgraded(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version))
	s := tc.waitLeader()
	waitNodeSecrets(t, s)
	conn, err := rawNodeConn(t).Conn(s.cfg.RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	nodes := pb.NewNodesClient(conn)
	n := workNode("n1")
	if err := registerRaw(t, nodes, n, ""); err != nil {
		t.Fatalf("an old client's registration: %v", err)
	}
	stored, _ := s.State().NodeByID(nil, n.GetId())
	if len(stored.GetSecretHash()) != 0 {
		t.Fatal("a hash is stored for a client that presented no secret")
	}
	for i := range 3 {
		hb, err := nodes.Heartbeat(ctx10s(t), &pb.NodeHeartbeatRequest{NodeId: n.GetId()})
		if err != nil {
			t.Fatalf("old client's heartbeat %d: %v", i, err)
		}
		if hb.GetRegisterAgain() {
			t.Fatal("an old client is asked to register again: it would only register without a secret")
		}
	}
	if _, err := pb.NewClientAllocsClient(conn).Watch(ctx10s(t), &pb.ClientAllocsRequest{NodeId: n.GetId()}); err != nil {
		t.Fatalf("old client's watch: %v", err)
	}
	if err := registerRaw(t, nodes, n, ""); err != nil {
		t.Fatalf("old client's registration again: %v", err)
	}

	// Upgraded: the client made a secret and presents it.
	secret := newSecret(t)
	hb, err := nodes.Heartbeat(withSecret(t, secret), &pb.NodeHeartbeatRequest{NodeId: n.GetId()})
	if err != nil || !hb.GetRegisterAgain() {
		t.Fatalf("upgraded client's heartbeat: %v, %v; want register_again", hb, err)
	}
	if err := registerRaw(t, nodes, n, secret); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if got, _ := s.State().NodeByID(nil, n.GetId()); !bytes.Equal(got.GetSecretHash(), endpoints.HashNodeSecret(secret)) {
			return fmt.Errorf("node %s's secret not adopted", n.GetId())
		}
		return nil
	})
	_, err = nodes.Heartbeat(ctx10s(t), &pb.NodeHeartbeatRequest{NodeId: n.GetId()})
	wantCode(t, "heartbeat without the secret once adopted", err, codes.PermissionDenied, n.GetId())
	if hb, err := nodes.Heartbeat(withSecret(t, secret), &pb.NodeHeartbeatRequest{NodeId: n.GetId()}); err != nil || hb.GetRegisterAgain() {
		t.Fatalf("heartbeat with the adopted secret: %v, %v", hb, err)
	}
}
