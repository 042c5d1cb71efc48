package server

import (
	"fmt"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func TestLeaderOnlyIsTheWriteRoutes(t *testing.T) {
	for _, m := range []string{pb.Jobs_Register_FullMethodName, pb.Volumes_Register_FullMethodName, pb.Claims_Claim_FullMethodName} {
		if !LeaderOnly(m) {
			t.Errorf("LeaderOnly(%s) = false", m)
		}
	}
	for _, m := range []string{pb.Jobs_Get_FullMethodName, pb.ClientAllocs_Watch_FullMethodName, pb.Status_Leader_FullMethodName, "/no.Such/Method"} {
		if LeaderOnly(m) {
			t.Errorf("LeaderOnly(%s) = true", m)
		}
	}
}

// A follower names the leader's RPC address; the leader names none (it
// serves writes itself).
func TestOtherLeaderRPCAddr(t *testing.T) {
	tc := newTestCluster(t, 3)
	leader := tc.waitLeader()
	if got := leader.OtherLeaderRPCAddr(); got != "" {
		t.Fatalf("the leader's OtherLeaderRPCAddr = %q, want \"\"", got)
	}
	for _, f := range tc.followers(leader) {
		testutil.WaitFor(t, 10*time.Second, func() error {
			if got := f.OtherLeaderRPCAddr(); got != leader.RPCAddr() {
				return fmt.Errorf("follower %s: OtherLeaderRPCAddr = %q, want %q", f.cfg.Name, got, leader.RPCAddr())
			}
			return nil
		})
	}
}
