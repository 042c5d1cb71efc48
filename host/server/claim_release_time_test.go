package server

import (
	"fmt"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// A client's report that its alloc ended moves the alloc's claim to
// releasing at the server's clock, not at the update's updated_at (the
// client's clock, here an hour behind): the claim's state_entered_at and
// modified_at, which the releasing age metric reads, are the server's.
func TestClientUpdateTimesTheReleaseByTheServersClock(t *testing.T) {
	tc, s := schedVolumeCluster(t, pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
	jobs := pb.NewJobsClient(tc.conn(s))
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob("a", 1)}); err != nil {
		t.Fatal(err)
	}
	holder := waitAllocs(t, tc, s, "a", 1, nil)[0]
	// Less than the heartbeat TTL: the nodes stay up.
	tc.clock.Advance(5 * time.Second)
	now := tc.clock.Now().UnixNano()
	skewed := tc.clock.Now().Add(-time.Hour).UnixNano()
	if _, err := pb.NewClientAllocsClient(tc.conn(s)).Update(ctx10s(t), &pb.ClientAllocUpdateRequest{NodeId: holder.GetNodeId(),
		Updates: []*pb.AllocClientUpdate{{AllocId: holder.GetId(), ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, UpdatedAt: skewed}}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		cs, err := s.State().ClaimsByAlloc(nil, holder.GetId())
		if err != nil || len(cs) != 1 || cs[0].GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
			return fmt.Errorf("claims %v (%v), want one releasing", cs, err)
		}
		return nil
	})
	cs, _ := s.State().ClaimsByAlloc(nil, holder.GetId())
	if c := cs[0]; c.GetStateEnteredAt() != now || c.GetModifiedAt() != now {
		t.Fatalf("releasing claim entered at %d, modified at %d; want the server's clock %d (the client's was %d)",
			c.GetStateEnteredAt(), c.GetModifiedAt(), now, skewed)
	}
}
