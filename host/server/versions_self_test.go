package server

import (
	"errors"
	"testing"
	"time"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// The server that checks a version gate counts itself at the version it
// runs, before its own record commits: a dev agent's leader is ready
// (requests served) before it records itself, and a `volume create` in
// that window was refused "wait for every server to record its version"
// (acceptance, CI). A row deleted here, with discovery's rounds an hour
// apart, stands for that window.
func TestGateCountsTheCheckingServerAtItsOwnVersion(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version), func(c *testConfig) {
		c.RetryInterval = time.Hour
		c.roundRetry = time.Hour
	})
	s := tc.waitLeader()
	testutil.WaitFor(t, 30*time.Second, func() error {
		if m, _ := s.State().ServerByID(nil, s.ID()); m == nil {
			return errors.New("not recorded yet")
		}
		return nil
	})
	if _, err := s.raftApply(ctx10s(t), fsm.ServerDelete, &pb.ServerDeleteCommand{Id: s.ID()}); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.State().ServerByID(nil, s.ID()); m != nil {
		t.Fatalf("own row still recorded: %v", m)
	}
	gate := versions.MustConstraint(">= " + endpoints.NodeSecretsSinceVersion)
	if err := s.requireServersAt(gate, endpoints.NodeSecretsSinceVersion, "node secrets"); err != nil {
		t.Fatalf("gate with only this server, its row not recorded: %v", err)
	}
}
