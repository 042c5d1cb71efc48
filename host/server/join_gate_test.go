package server

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

// waitRecorded waits until s's state records server id at version v.
func waitRecorded(t *testing.T, s *Server, id, v string) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		m, err := s.fsm.State().ServerByID(nil, id)
		if err != nil {
			return err
		}
		if m.GetVersion() != v {
			return fmt.Errorf("server %s recorded at %q, want %q", id, m.GetVersion(), v)
		}
		return nil
	})
}

// TestJoinBelowApplyGateRefused: once every recorded server is at the
// in-apply gates (claimStateSince, pluginInstancesSince), the leader
// refuses to add a server below them to raft, with FailedPrecondition
// naming the server, its version and the gates, and records nothing; a
// server at the gates (its own re-join) is accepted.
func TestJoinBelowApplyGateRefused(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version))
	leader := tc.waitLeader()
	waitRecorded(t, leader, leader.id, version.Version)
	op := pb.NewOperatorClient(tc.conn(leader))

	old := &pb.ServerMember{Id: "old-id", Name: "old", RaftAddr: "raft-old", RpcAddr: "127.0.0.1:1", Version: "0.1.0-dev.3"}
	_, err := op.Join(ctx10s(t), &pb.JoinRequest{Server: old})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Join of a dev.3 server: %v, want FailedPrecondition", err)
	}
	for _, want := range []string{"old-id", "0.1.0-dev.3", "pluginInstancesSince", "claimStateSince", fsm.PluginInstancesSinceVersion} {
		if !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("refusal %q does not name %q", status.Convert(err).Message(), want)
		}
	}
	cfg := leader.raft.GetConfiguration()
	if err := cfg.Error(); err != nil {
		t.Fatal(err)
	}
	for _, srv := range cfg.Configuration().Servers {
		if srv.ID == "old-id" {
			t.Fatalf("refused server added to raft: %v", cfg.Configuration().Servers)
		}
	}
	if m, err := leader.fsm.State().ServerByID(nil, "old-id"); err != nil || m != nil {
		t.Fatalf("refused server recorded: %v (%v)", m, err)
	}
	// Without a version it cannot show it is at the gates either.
	old.Version = ""
	if _, err := op.Join(ctx10s(t), &pb.JoinRequest{Server: old}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Join of a server without a version: %v, want FailedPrecondition", err)
	}
	if _, err := op.Join(ctx10s(t), &pb.JoinRequest{Server: leader.self()}); err != nil {
		t.Fatalf("re-join of the leader at %s: %v", version.Version, err)
	}
}

// TestDowngradedLeaderNotRecorded: a server restarted below the gates its
// cluster applies (a downgrade in place) does not record its older
// version: ensureRegistered refuses with ErrServerBelowGate and the
// servers table keeps its earlier record, so the gates stay on.
func TestDowngradedLeaderNotRecorded(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version), func(c *testConfig) { c.DataDir = t.TempDir() })
	s := tc.waitLeader()
	waitRecorded(t, s, s.id, version.Version)
	s = tc.restart(s, func(c *Config) { c.Version = "0.1.0-dev.3" })
	tc.waitLeader()
	testutil.WaitFor(t, 10*time.Second, func() error {
		err := newDiscovery(s).ensureRegistered(ctx10s(t))
		if !errors.Is(err, ErrServerBelowGate) {
			return fmt.Errorf("ensureRegistered: %v, want ErrServerBelowGate", err)
		}
		return nil
	})
	if m, err := s.fsm.State().ServerByID(nil, s.id); err != nil || m.GetVersion() != version.Version {
		t.Fatalf("record after the downgrade: %v (%v), want it kept at %s", m, err, version.Version)
	}
}
