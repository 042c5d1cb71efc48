package server

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// A client's alloc watch answer fits its byte budget however many jobs the
// node runs: a paged client gets allocs in full with their jobs up to the
// budget, the rest as stubs with more set, and asks again for them; a job
// version the client holds is not sent again. Every alloc was sent in
// full with a copy of its job, so a node running enough large jobs got an
// answer over the message limit and never learnt of a placement again.
func TestClientWatchAnswerIsHeldToItsByteBudget(t *testing.T) {
	const budget = 256 << 10
	tc := newTestCluster(t, 1, func(c *testConfig) { c.clientWatchBytes = budget })
	s := tc.servers[0]
	n1 := workNode("n1")
	registerNodes(t, tc, s, n1)
	ids := []string{"a", "b", "c", "d"}
	for _, id := range ids {
		j := serviceJob(id, 1)
		j.Meta = map[string]string{"blob": strings.Repeat("x", 100<<10)}
		registerJob(t, tc, s, j)
		waitAllocs(t, tc, s, id, 1, nil)
	}
	watch := pb.NewClientAllocsClient(tc.conn(s))

	// An older client, not paged, still gets everything in full.
	resp, err := watch.Watch(ctx10s(t), &pb.ClientAllocsRequest{NodeId: n1.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetMore() || len(resp.GetJobs()) != len(ids) {
		t.Fatalf("unpaged answer: more %v, %d jobs; want every alloc in full with its job", resp.GetMore(), len(resp.GetJobs()))
	}

	known := map[string]uint64{}
	var knownJobs []string
	full := map[string]int{}
	for round := 0; ; round++ {
		if round == len(ids) {
			t.Fatalf("still more after %d rounds", round)
		}
		resp, err := watch.Watch(ctx10s(t), &pb.ClientAllocsRequest{NodeId: n1.GetId(), Known: known, KnownJobs: knownJobs, Paged: true})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(resp.GetAllocs()) != len(ids) {
			t.Fatalf("round %d: %d allocs, want all %d (stubs or in full)", round, len(resp.GetAllocs()), len(ids))
		}
		size := 0
		for key, j := range resp.GetJobs() {
			if slices.Contains(knownJobs, key) {
				t.Fatalf("round %d: job %s sent again though the client holds it", round, key)
			}
			size += proto.Size(j)
		}
		var sentFull []string
		for _, a := range resp.GetAllocs() {
			if a.GetJobId() == "" {
				continue
			}
			size += proto.Size(a)
			sentFull = append(sentFull, a.GetId())
			full[a.GetId()]++
			known[a.GetId()] = a.GetAllocModifyIndex()
			knownJobs = append(knownJobs, endpoints.JobKey(a.GetJobId(), a.GetJobVersion()))
		}
		if len(sentFull) == 0 {
			t.Fatalf("round %d sent no alloc in full", round)
		}
		if size > budget && len(sentFull) > 1 {
			t.Fatalf("round %d: %d bytes of allocs and jobs in full, over the budget of %d", round, size, budget)
		}
		if !resp.GetMore() {
			break
		}
	}
	if len(full) != len(ids) {
		t.Fatalf("allocs sent in full over the rounds: %v, want one of each of %d jobs", full, len(ids))
	}
}

// An alloc stopped before its client ran it is sent in full until the
// client has reported it ended: the client takes the alloc's claims off
// the node and reports it complete from that answer. Sent as a stub, the
// claims stayed releasing and the alloc pending for good.
func TestClientWatchSendsAStoppedAllocTheClientHasNotRunUntilItEnded(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n1 := workNode("n1")
	registerNodes(t, tc, s, n1)
	registerJob(t, tc, s, serviceJob("web", 1))
	alloc := waitAllocs(t, tc, s, "web", 1, nil)[0]
	if _, err := pb.NewJobsClient(tc.conn(s)).Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "web"}); err != nil {
		t.Fatal(err)
	}
	watch := pb.NewClientAllocsClient(tc.conn(s))
	// sent is the alloc as the node's answer carries it, nil when it is not
	// in it (collected).
	sent := func() *pb.Allocation {
		t.Helper()
	ask:
		for {
			resp, err := watch.Watch(ctx10s(t), &pb.ClientAllocsRequest{NodeId: n1.GetId(), Paged: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range resp.GetAllocs() {
				if a.GetId() == alloc.GetId() {
					if a.GetJobId() != "" && a.GetDesiredStatus() != pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP {
						continue ask // the stop is not applied yet
					}
					return a
				}
			}
			return nil
		}
	}
	if a := sent(); a == nil || a.GetJobId() == "" {
		t.Fatalf("stopped alloc %s the client never ran was sent as %v; want it in full", alloc.GetId(), a)
	}
	if _, err := pb.NewClientAllocsClient(tc.conn(s)).Update(ctx10s(t), &pb.ClientAllocUpdateRequest{NodeId: n1.GetId(), Updates: []*pb.AllocClientUpdate{{
		AllocId: alloc.GetId(), ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		a, err := s.fsm.State().AllocByID(nil, alloc.GetId())
		if err != nil || a.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE {
			return fmt.Errorf("alloc %s: %v (%v), want complete", alloc.GetId(), a.GetClientStatus(), err)
		}
		return nil
	})
	if a := sent(); a != nil && a.GetJobId() != "" {
		t.Fatalf("alloc %s ended and not held by the client was sent in full; want a stub", alloc.GetId())
	}
}
