package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func TestClusterFormsFromRetryJoinAndRecordsEveryServer(t *testing.T) {
	tc := newTestCluster(t, 3)
	leader := tc.waitLeader()
	f := leader.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if got := len(f.Configuration().Servers); got != 3 {
		t.Fatalf("raft configuration has %d servers, want 3", got)
	}
	// Every server records itself, so each can map the leader to its RPC address.
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, s := range tc.servers {
			servers, err := s.State().Servers(nil)
			if err != nil {
				return err
			}
			if len(servers) != 3 {
				return fmt.Errorf("%s knows %d servers in state, want 3", s.cfg.Name, len(servers))
			}
		}
		return nil
	})
	resp, err := pb.NewStatusClient(tc.conn(tc.servers[0])).Peers(context.Background(), &pb.PeersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, s := range tc.servers {
		want = append(want, s.cfg.RPCAddr)
	}
	sort.Strings(want)
	if fmt.Sprint(resp.GetRpcAddrs()) != fmt.Sprint(want) {
		t.Fatalf("peers = %v, want %v", resp.GetRpcAddrs(), want)
	}
}

func TestWriteToFollowerIsForwardedAndReadsReportTheirIndex(t *testing.T) {
	tc := newTestCluster(t, 3)
	leader := tc.waitLeader()
	follower := tc.followers(leader)[0]

	n := testNode("n1")
	resp, err := tc.register(follower, n)
	if err != nil {
		t.Fatalf("register via follower: %v", err)
	}
	if resp.GetMeta().GetIndex() == 0 {
		t.Fatal("register returned no index")
	}
	if resp.GetHeartbeatTtlMs() != (10 * time.Second).Milliseconds() {
		t.Fatalf("heartbeat ttl = %dms, want 10000", resp.GetHeartbeatTtlMs())
	}
	// A consistent read from a follower is answered by the leader and
	// reflects the write.
	get, err := pb.NewNodesClient(tc.conn(follower)).Get(context.Background(), &pb.NodeGetRequest{
		NodeId: n.GetId(), Query: &pb.QueryOptions{Consistent: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if get.GetMeta().GetServedBy() != leader.ID() {
		t.Fatalf("consistent read served by %s, want leader %s", get.GetMeta().GetServedBy(), leader.ID())
	}
	if get.GetMeta().GetIndex() < resp.GetMeta().GetIndex() {
		t.Fatalf("read index %d is before the write's %d", get.GetMeta().GetIndex(), resp.GetMeta().GetIndex())
	}
	// A default read is local to the follower.
	waitNode(t, follower, n.GetId(), pb.NodeStatus_NODE_STATUS_READY)
	list, err := pb.NewNodesClient(tc.conn(follower)).List(context.Background(), &pb.NodeListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if list.GetMeta().GetServedBy() != follower.ID() || len(list.GetNodes()) != 1 {
		t.Fatalf("stale list served by %s with %d nodes, want follower %s with 1", list.GetMeta().GetServedBy(), len(list.GetNodes()), follower.ID())
	}
	if !list.GetMeta().GetKnownLeader() {
		t.Fatal("follower read says no leader is known")
	}
}

func TestBlockingListWakesOnWrite(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	if _, err := tc.register(s, testNode("first")); err != nil {
		t.Fatal(err)
	}
	first, err := pb.NewNodesClient(tc.conn(s)).List(context.Background(), &pb.NodeListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		resp *pb.NodeListResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		r, err := pb.NewNodesClient(tc.conn(s)).List(context.Background(), &pb.NodeListRequest{
			Query: &pb.QueryOptions{MinIndex: first.GetMeta().GetIndex(), MaxWaitMs: 30_000},
		})
		done <- result{r, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("blocking query returned before any write: %v %v", r.resp, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := tc.register(s, testNode("second")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if len(r.resp.GetNodes()) != 2 || r.resp.GetMeta().GetIndex() <= first.GetMeta().GetIndex() {
			t.Fatalf("woke with %d nodes at index %d, want 2 nodes past %d", len(r.resp.GetNodes()), r.resp.GetMeta().GetIndex(), first.GetMeta().GetIndex())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocking query did not wake on write")
	}
	// A blocking query whose wait runs out answers with the current state.
	start := time.Now()
	r, err := pb.NewNodesClient(tc.conn(s)).List(context.Background(), &pb.NodeListRequest{
		Query: &pb.QueryOptions{MinIndex: 1 << 40, MaxWaitMs: 100},
	})
	if err != nil {
		t.Fatalf("timed-out blocking query: %v", err)
	}
	if len(r.GetNodes()) != 2 || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("timed-out query: %d nodes after %s", len(r.GetNodes()), time.Since(start))
	}
}

func TestLeaderLossElectsNewLeaderAndKeepsState(t *testing.T) {
	tc := newTestCluster(t, 3)
	old := tc.waitLeader()
	n := testNode("survivor")
	if _, err := tc.register(old, n); err != nil {
		t.Fatal(err)
	}
	if err := old.Shutdown(); err != nil {
		t.Fatal(err)
	}
	leader := tc.waitLeader(old)
	if leader == old {
		t.Fatal("shut-down server still leads")
	}
	waitNode(t, leader, n.GetId(), pb.NodeStatus_NODE_STATUS_READY)
	// The two survivors still accept writes, through either of them.
	for _, s := range tc.live() {
		if _, err := tc.register(s, testNode("after-"+s.cfg.Name)); err != nil {
			t.Fatalf("write via %s after leader loss: %v", s.cfg.Name, err)
		}
	}
	nodes, _ := leader.State().Nodes(nil)
	if len(nodes) != 3 {
		t.Fatalf("new leader has %d nodes, want 3", len(nodes))
	}
}

func TestPartitionedLeaderLosesNoCommittedWrite(t *testing.T) {
	tc := newTestCluster(t, 3)
	old := tc.waitLeader()
	committed := testNode("committed")
	if _, err := tc.register(old, committed); err != nil {
		t.Fatal(err)
	}

	tc.partition(old)
	// Propose on the isolated leader before it notices it lost its quorum:
	// the proposal must fail rather than be acknowledged and lost.
	if !old.IsLeader() {
		t.Fatal("leader stepped down before the test could propose to it")
	}
	lost := testNode("never-committed")
	typ, cmd := nodeRegister(lost)
	if _, err := old.raftApply(context.Background(), typ, cmd); !errors.Is(err, raft.ErrLeadershipLost) {
		t.Fatalf("partitioned leader's proposal: %v, want raft.ErrLeadershipLost", err)
	}
	leader := tc.waitLeaderAmong(tc.followers(old))
	during := testNode("during-partition")
	if _, err := tc.register(leader, during); err != nil {
		t.Fatalf("write to majority side: %v", err)
	}

	tc.heal(old)
	tc.waitLeader()
	for _, s := range tc.servers {
		waitNode(t, s, committed.GetId(), pb.NodeStatus_NODE_STATUS_READY)
		waitNode(t, s, during.GetId(), pb.NodeStatus_NODE_STATUS_READY)
		if n, _ := s.State().NodeByID(nil, lost.GetId()); n != nil {
			t.Fatalf("%s has the write the partitioned leader could not commit", s.cfg.Name)
		}
	}
}

func (tc *testCluster) waitLeaderAmong(servers []*Server) *Server {
	tc.t.Helper()
	var leader *Server
	testutil.WaitFor(tc.t, 15*time.Second, func() error {
		for _, s := range servers {
			if s.IsLeader() {
				leader = s
				return nil
			}
		}
		return fmt.Errorf("no leader among %d servers", len(servers))
	})
	return leader
}

// registerThroughLeaderChanges registers n with the leader among the live
// servers but those excluded, again after a leader change: on a loaded
// machine a follower's heartbeat timeout can fire and the leader step
// down with the registration in flight ("leadership lost while
// committing log"). Registering a node again is harmless.
func registerThroughLeaderChanges(t *testing.T, tc *testCluster, n *pb.Node, excluding ...*Server) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, func() error {
		for _, s := range tc.live(excluding...) {
			if s.IsLeader() {
				_, err := tc.register(s, n)
				return err
			}
		}
		return errors.New("no leader")
	})
}

func TestLaggingFollowerCatchesUpBySnapshotInstall(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *testConfig) {
		c.RaftSnapshotThreshold = 16
		c.RaftTrailingLogs = 8
	})
	leader := tc.waitLeader()
	lagging := tc.followers(leader)[0]
	tc.partition(lagging)

	var ids []string
	for i := range 100 {
		n := testNode(fmt.Sprintf("n%03d", i))
		ids = append(ids, n.GetId())
		registerThroughLeaderChanges(t, tc, n, lagging)
	}
	// Snapshot and compact the log on every up-to-date server, so whichever
	// leads after the heal no longer has the follower's next entry.
	for _, s := range tc.followers(lagging) {
		testutil.WaitFor(t, 10*time.Second, func() error {
			if s.raft.AppliedIndex() < leader.raft.AppliedIndex() {
				return fmt.Errorf("%s has not applied everything yet", s.cfg.Name)
			}
			return nil
		})
		if err := s.raft.Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
		first, err := s.raftFirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		if first <= lagging.raft.LastIndex() {
			t.Fatalf("%s's log still starts at %d, follower is at %d: no snapshot would be needed", s.cfg.Name, first, lagging.raft.LastIndex())
		}
	}

	tc.heal(lagging)
	for _, id := range ids {
		waitNode(t, lagging, id, pb.NodeStatus_NODE_STATUS_READY)
	}
	// The FSM restore makes the nodes visible a moment before raft records
	// the installed snapshot, so wait for that record rather than read it once.
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := lagging.raft.Stats()["last_snapshot_index"]; got == "0" {
			return fmt.Errorf("follower caught up without installing a snapshot")
		}
		return nil
	})
}

func TestFourthServerJoinsAsVoterAndForceLeaveRemovesIt(t *testing.T) {
	tc := newTestCluster(t, 3)
	leader := tc.waitLeader()
	lis := listen(t)
	fourth := tc.startServer(lis, []string{tc.servers[0].cfg.RPCAddr}, 3)
	testutil.WaitFor(t, 15*time.Second, func() error {
		servers, err := leader.raftServers()
		if err != nil {
			return err
		}
		for _, rs := range servers {
			if rs.GetId() == fourth.ID() && rs.GetVoter() && rs.GetRpcAddr() == fourth.cfg.RPCAddr {
				return nil
			}
		}
		return fmt.Errorf("fourth server not a voter yet: %v", servers)
	})

	// The fourth server fails; force-leave it through a follower, by name.
	if err := fourth.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// With the fourth voter down, every one of the three left is needed for
	// a quorum, and under load the leader can step down before the removal
	// commits: Unavailable is the answer to retry, as an operator would.
	var resp *pb.RemovePeerResponse
	testutil.WaitFor(t, 15*time.Second, func() error {
		leader = tc.waitLeader(fourth)
		follower := tc.followers(leader)[0]
		var err error
		resp, err = pb.NewOperatorClient(tc.conn(follower)).RemovePeer(context.Background(), &pb.RemovePeerRequest{Name: fourth.cfg.Name})
		if status.Code(err) == codes.Unavailable {
			return err
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})
	if resp.GetRemovedId() != fourth.ID() {
		t.Fatalf("removed %s, want %s", resp.GetRemovedId(), fourth.ID())
	}
	leader = tc.waitLeader(fourth)
	if m, _ := leader.State().ServerByID(nil, fourth.ID()); m != nil {
		t.Fatal("force-left server still recorded")
	}
	f := leader.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == fourth.ID() {
			t.Fatal("force-left server still in the raft configuration")
		}
	}
	_, err := pb.NewOperatorClient(tc.conn(leader)).RemovePeer(context.Background(), &pb.RemovePeerRequest{Name: "no-such-server"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("removing an unknown server: %v, want NotFound", err)
	}
}

func TestHeartbeatTTLMarksNodeDownAndHeartbeatMarksItReady(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n := testNode("hb")
	if _, err := tc.register(s, n); err != nil {
		t.Fatal(err)
	}
	nodes := pb.NewNodesClient(tc.conn(s))
	indexBefore, _ := s.State().Index("nodes")

	// Heartbeats inside the TTL keep the node ready without raft writes.
	for range 5 {
		tc.clock.Advance(9 * time.Second)
		if _, err := nodes.Heartbeat(context.Background(), &pb.NodeHeartbeatRequest{NodeId: n.GetId()}); err != nil {
			t.Fatal(err)
		}
	}
	if idx, _ := s.State().Index("nodes"); idx != indexBefore {
		t.Fatalf("heartbeats wrote to raft: nodes index %d -> %d", indexBefore, idx)
	}
	waitNode(t, s, n.GetId(), pb.NodeStatus_NODE_STATUS_READY)

	tc.clock.Advance(10 * time.Second)
	waitNode(t, s, n.GetId(), pb.NodeStatus_NODE_STATUS_DOWN)
	down, _ := s.State().NodeByID(nil, n.GetId())
	if down.GetStatusUpdatedAt() != tc.clock.Now().UnixNano() {
		t.Fatalf("status time %d is not the injected clock's %d", down.GetStatusUpdatedAt(), tc.clock.Now().UnixNano())
	}

	if _, err := nodes.Heartbeat(context.Background(), &pb.NodeHeartbeatRequest{NodeId: n.GetId()}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, s, n.GetId(), pb.NodeStatus_NODE_STATUS_READY)

	_, err := nodes.Heartbeat(context.Background(), &pb.NodeHeartbeatRequest{NodeId: testNode("ghost").GetId()})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("heartbeat of unregistered node: %v, want NotFound", err)
	}
}

func TestNewLeaderGivesNodesAGracePeriod(t *testing.T) {
	tc := newTestCluster(t, 3)
	old := tc.waitLeader()
	n := testNode("graced")
	if _, err := tc.register(old, n); err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(8 * time.Second) // 2s left of the TTL on the old leader
	if err := old.Shutdown(); err != nil {
		t.Fatal(err)
	}
	leader := tc.waitLeader(old)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !leader.heartbeats.Tracked(n.GetId()) {
			return fmt.Errorf("new leader has no timer for the node yet")
		}
		return nil
	})
	// Past the TTL but inside TTL+grace: still ready.
	tc.clock.Advance(12 * time.Second)
	waitNode(t, leader, n.GetId(), pb.NodeStatus_NODE_STATUS_READY)
	tc.clock.Advance(4 * time.Second)
	waitNode(t, leader, n.GetId(), pb.NodeStatus_NODE_STATUS_DOWN)
}

func TestEveryMethodHasARoute(t *testing.T) {
	for _, svc := range []struct {
		name    string
		methods []string
	}{
		{pb.Status_ServiceDesc.ServiceName, methodNames(pb.Status_ServiceDesc.Methods)},
		{pb.Operator_ServiceDesc.ServiceName, methodNames(pb.Operator_ServiceDesc.Methods)},
		{pb.Nodes_ServiceDesc.ServiceName, methodNames(pb.Nodes_ServiceDesc.Methods)},
		{pb.NodeOps_ServiceDesc.ServiceName, methodNames(pb.NodeOps_ServiceDesc.Methods)},
	} {
		for _, m := range svc.methods {
			full := "/" + svc.name + "/" + m
			if _, ok := routes[full]; !ok {
				t.Errorf("%s has no forwarding route", full)
			}
			if _, err := newReply(full); err != nil {
				t.Errorf("newReply(%s): %v", full, err)
			}
		}
	}
}

func TestLeaveOnTerminateRemovesTheServer(t *testing.T) {
	tc := newTestCluster(t, 3)
	leader := tc.waitLeader()
	// Both a follower and the leader leave cleanly.
	for _, leaving := range []*Server{tc.followers(leader)[0], leader} {
		leaving.cfg.LeaveOnTerminate = true
		if err := leaving.Shutdown(); err != nil {
			t.Fatal(err)
		}
		rest := tc.waitLeader(leaving)
		testutil.WaitFor(t, 10*time.Second, func() error {
			f := rest.raft.GetConfiguration()
			if err := f.Error(); err != nil {
				return err
			}
			for _, srv := range f.Configuration().Servers {
				if string(srv.ID) == leaving.ID() {
					return fmt.Errorf("%s still in the configuration", leaving.cfg.Name)
				}
			}
			// The record goes in the command after the raft change
			// (removePeer), so it is waited for too.
			if m, _ := rest.State().ServerByID(nil, leaving.ID()); m != nil {
				return fmt.Errorf("%s still recorded in state after leaving", leaving.cfg.Name)
			}
			return nil
		})
	}
	// One server left of three, and it still leads alone.
	if live := tc.live(); len(live) != 1 || !live[0].IsLeader() {
		t.Fatalf("after two leaves: %d live servers", len(live))
	}
}

func TestServerThatLeftRejoinsWhenRestarted(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *testConfig) { c.DataDir = t.TempDir() })
	leader := tc.waitLeader()
	leaving := tc.followers(leader)[0]
	// Its own snapshot still holds its record and the old configuration.
	if err := leaving.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatal(err)
	}
	n := testNode("written-while-away")
	leaving.cfg.LeaveOnTerminate = true
	back := tc.restart(leaving, func(c *Config) { c.LeaveOnTerminate = false })
	if _, err := tc.register(leader, n); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		servers, err := leader.raftServers()
		if err != nil {
			return err
		}
		for _, rs := range servers {
			if rs.GetId() == back.ID() && rs.GetVoter() {
				return nil
			}
		}
		return fmt.Errorf("%s is not a voter again: %v", back.cfg.Name, servers)
	})
	waitNode(t, back, n.GetId(), pb.NodeStatus_NODE_STATUS_READY)
}

// throughLeaderChanges calls call until it answers with anything but
// Unavailable, which a server gives while leadership moves ("not the
// leader (leadership changed); retry"): on a loaded machine a test
// cluster's leader may step down between two calls of a test, and a real
// client retries those calls too. Any other answer is returned as it is.
func throughLeaderChanges[T any](t *testing.T, call func() (T, error)) (T, error) {
	t.Helper()
	var (
		resp T
		err  error
	)
	testutil.WaitFor(t, 30*time.Second, func() error {
		resp, err = call()
		if status.Code(err) == codes.Unavailable {
			return err
		}
		return nil
	})
	return resp, err
}
