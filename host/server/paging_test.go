package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/rpc/pb"
)

// applyNodes registers count nodes through raft, concurrently so raft
// batches them; every third is down. It returns the IDs in order.
func applyNodes(t *testing.T, s *Server, count int) []string {
	t.Helper()
	ids := make([]string, count)
	var wg sync.WaitGroup
	errs := make(chan error, count)
	sem := make(chan struct{}, 64)
	for i := range count {
		ids[i] = fmt.Sprintf("%08x-0000-4000-8000-%012x", i*7919, i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			n := testNode(fmt.Sprintf("node-%d", i))
			n.Id = ids[i]
			st := pb.NodeStatus_NODE_STATUS_READY
			if i%3 == 0 {
				st = pb.NodeStatus_NODE_STATUS_DOWN
			}
			n.Status = st
			if _, err := s.raftApply(context.Background(), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// listAll follows next_token through every page.
func listAll(t *testing.T, c pb.NodesClient, perPage uint32, st pb.NodeStatus) (ids []string, pages int) {
	t.Helper()
	token := ""
	for {
		resp, err := c.List(context.Background(), &pb.NodeListRequest{Status: st, Query: &pb.QueryOptions{PerPage: perPage, NextToken: token}})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		limit := perPage
		if limit == 0 {
			limit = endpoints.DefaultPerPage
		}
		if len(resp.GetNodes()) > int(limit) {
			t.Fatalf("page of %d nodes with per_page %d", len(resp.GetNodes()), perPage)
		}
		for _, n := range resp.GetNodes() {
			if st != pb.NodeStatus_NODE_STATUS_UNSPECIFIED && n.GetStatus() != st {
				t.Fatalf("node %s is %s in a list filtered on %s", n.GetId(), n.GetStatus(), st)
			}
			ids = append(ids, n.GetId())
		}
		token = resp.GetMeta().GetNextToken()
		if token == "" {
			return ids, pages
		}
		if pages > 100_000 {
			t.Fatal("pagination does not end")
		}
	}
}

func TestNodeListPagesAndFilters(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.waitLeader()
	ids := applyNodes(t, s, 2500)
	c := pb.NewNodesClient(tc.conn(s))

	got, pages := listAll(t, c, 0, 0)
	if !slices.Equal(got, ids) || pages != 25 {
		t.Fatalf("default pages: %d nodes in %d pages (want %d in 25), in order: %v", len(got), pages, len(ids), slices.IsSorted(got))
	}
	got, pages = listAll(t, c, endpoints.MaxPerPage, 0)
	if !slices.Equal(got, ids) || pages != 3 {
		t.Fatalf("per_page %d: %d nodes in %d pages", endpoints.MaxPerPage, len(got), pages)
	}
	var wantDown, wantReady []string
	for _, id := range ids {
		n, err := s.State().NodeByID(nil, id)
		if err != nil {
			t.Fatal(err)
		}
		if n.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN {
			wantDown = append(wantDown, id)
		} else {
			wantReady = append(wantReady, id)
		}
	}
	if got, _ := listAll(t, c, 333, pb.NodeStatus_NODE_STATUS_DOWN); !slices.Equal(got, wantDown) || len(got) != 834 {
		t.Fatalf("status=down: %d nodes, want %d", len(got), len(wantDown))
	}
	if got, _ := listAll(t, c, 1000, pb.NodeStatus_NODE_STATUS_READY); !slices.Equal(got, wantReady) {
		t.Fatalf("status=ready: %d nodes, want %d", len(got), len(wantReady))
	}

	// Refusals carry InvalidArgument, not a silently clamped page.
	_, err := c.List(context.Background(), &pb.NodeListRequest{Query: &pb.QueryOptions{PerPage: endpoints.MaxPerPage + 1}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "per_page 1001 is over the maximum of 1000") {
		t.Fatalf("per_page over the max: %v", err)
	}
	_, err = c.List(context.Background(), &pb.NodeListRequest{Status: 9})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown status filter: %v", err)
	}

	// A blocking query on a page wakes when the table changes.
	first, err := c.List(context.Background(), &pb.NodeListRequest{Query: &pb.QueryOptions{PerPage: 10, NextToken: ids[100]}})
	if err != nil {
		t.Fatal(err)
	}
	if first.GetNodes()[0].GetId() != ids[100] || first.GetMeta().GetNextToken() != ids[110] {
		t.Fatalf("page from ids[100] starts at %s, next %s", first.GetNodes()[0].GetId(), first.GetMeta().GetNextToken())
	}
	done := make(chan *pb.NodeListResponse, 1)
	go func() {
		resp, err := c.List(context.Background(), &pb.NodeListRequest{Query: &pb.QueryOptions{
			PerPage: 10, NextToken: ids[100], MinIndex: first.GetMeta().GetIndex(), MaxWaitMs: 30_000}})
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	select {
	case <-done:
		t.Fatal("blocking page returned before any change")
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := tc.register(s, testNode("late")); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-done:
		if resp.GetMeta().GetIndex() <= first.GetMeta().GetIndex() {
			t.Fatalf("woke at index %d, not after %d", resp.GetMeta().GetIndex(), first.GetMeta().GetIndex())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("blocking page did not wake on a write")
	}
}

func TestServerListsArePaged(t *testing.T) {
	tc := newTestCluster(t, 3)
	leader := tc.waitLeader()
	ctx := context.Background()
	op := pb.NewOperatorClient(tc.conn(leader))
	var want []string
	for _, s := range tc.servers {
		want = append(want, s.ID())
	}
	slices.Sort(want)

	// Members: one per page, by server ID.
	var got []string
	token := ""
	for range 4 {
		resp, err := op.Members(ctx, &pb.MembersRequest{Query: &pb.QueryOptions{PerPage: 1, NextToken: token}})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetMembers()) != 1 || resp.GetMembers()[0].GetStatus() != pb.MemberStatus_MEMBER_STATUS_ALIVE {
			t.Fatalf("members page = %v", resp.GetMembers())
		}
		got = append(got, resp.GetMembers()[0].GetServer().GetId())
		if token = resp.GetMeta().GetNextToken(); token == "" {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("members pages = %v, want %v", got, want)
	}

	// Raft configuration: two, then one.
	conf, err := op.RaftConfiguration(ctx, &pb.RaftConfigurationRequest{Query: &pb.QueryOptions{PerPage: 2}})
	if err != nil {
		t.Fatal(err)
	}
	rest, err := op.RaftConfiguration(ctx, &pb.RaftConfigurationRequest{Query: &pb.QueryOptions{PerPage: 2, NextToken: conf.GetMeta().GetNextToken()}})
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, rs := range append(conf.GetServers(), rest.GetServers()...) {
		got = append(got, rs.GetId())
	}
	if !slices.Equal(got, want) || rest.GetMeta().GetNextToken() != "" {
		t.Fatalf("raft configuration pages = %v (next %q), want %v", got, rest.GetMeta().GetNextToken(), want)
	}

	// Peers: by RPC address.
	st := pb.NewStatusClient(tc.conn(leader))
	p1, err := st.Peers(ctx, &pb.PeersRequest{Query: &pb.QueryOptions{PerPage: 2}})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := st.Peers(ctx, &pb.PeersRequest{Query: &pb.QueryOptions{PerPage: 2, NextToken: p1.GetMeta().GetNextToken()}})
	if err != nil {
		t.Fatal(err)
	}
	addrs := append(p1.GetRpcAddrs(), p2.GetRpcAddrs()...)
	if len(p1.GetRpcAddrs()) != 2 || len(addrs) != 3 || !slices.IsSorted(addrs) || p2.GetMeta().GetNextToken() != "" {
		t.Fatalf("peers pages = %v, %v", p1.GetRpcAddrs(), p2.GetRpcAddrs())
	}

	// None of them blocks, and none pretends to.
	blocking := &pb.QueryOptions{MinIndex: 5}
	_, err1 := op.Members(ctx, &pb.MembersRequest{Query: blocking})
	_, err2 := st.Peers(ctx, &pb.PeersRequest{Query: blocking})
	_, err3 := op.RaftConfiguration(ctx, &pb.RaftConfigurationRequest{Query: blocking})
	for _, err := range []error{err1, err2, err3} {
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "does not support blocking queries") {
			t.Fatalf("blocking query on a server list: %v", err)
		}
	}
}

// TestJobVersionsArePaged pages a job's versions newest first: the token is
// the version a page starts at, a bad token and an oversized page are
// refused, and the last page has no token.
func TestJobVersionsArePaged(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.waitLeader()
	if _, err := tc.register(s, workNode("n1")); err != nil {
		t.Fatal(err)
	}
	jobs := pb.NewJobsClient(tc.conn(s))
	for i := range 5 {
		j := serviceJob("web", int32(i+1))
		if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: j}); err != nil {
			t.Fatal(err)
		}
	}
	var got, tokens []string
	token := ""
	for page := 0; ; page++ {
		resp, err := jobs.Versions(ctx10s(t), &pb.JobVersionsRequest{JobId: "web", Query: &pb.QueryOptions{PerPage: 2, NextToken: token}})
		if err != nil {
			t.Fatal(err)
		}
		var vs []string
		for _, v := range resp.GetVersions() {
			vs = append(vs, fmt.Sprint(v.GetVersion()))
		}
		got = append(got, strings.Join(vs, ","))
		token = resp.GetMeta().GetNextToken()
		tokens = append(tokens, token)
		if token == "" || page > 5 {
			break
		}
	}
	if want := []string{"4,3", "2,1", "0"}; !slices.Equal(got, want) {
		t.Fatalf("pages %q, want %q", got, want)
	}
	// Tokens grow, as api.Pages requires of every list.
	if len(tokens) != 3 || tokens[0] >= tokens[1] || tokens[2] != "" {
		t.Fatalf("tokens %q do not grow", tokens)
	}
	for _, q := range []*pb.QueryOptions{{NextToken: "v3"}, {NextToken: "3"}, {PerPage: endpoints.MaxPerPage + 1}} {
		_, err := jobs.Versions(ctx10s(t), &pb.JobVersionsRequest{JobId: "web", Query: q})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("versions with %v: %v, want InvalidArgument", q, err)
		}
	}
	if _, err := jobs.Versions(ctx10s(t), &pb.JobVersionsRequest{JobId: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("versions of an unknown job: %v, want NotFound", err)
	}
}
