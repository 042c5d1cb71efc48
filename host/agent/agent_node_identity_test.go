package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// The server block's node_identity_enforcement reaches the server: a
// strict agent refuses a registration that presents no node secret, while
// its own client (which presents one) is registered.
func TestAgentPassesNodeIdentityEnforcement(t *testing.T) {
	cfg := DevConfig()
	cfg.Ports = Ports{}
	cfg.Server.NodeIdentityEnforcement = "strict"
	a, err := New(cfg, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	testutil.WaitFor(t, 20*time.Second, func() error {
		if !a.Client().Registered() {
			return fmt.Errorf("the agent's own client is not registered")
		}
		return nil
	})
	pool := rpc.NewPool()
	defer pool.Close()
	conn, err := pool.Conn(a.rpcAddrs[0])
	if err != nil {
		t.Fatal(err)
	}
	ghost := &pb.Node{Id: "22222222-2222-4222-8222-222222222222", Name: "ghost", Status: pb.NodeStatus_NODE_STATUS_READY}
	// Strict takes effect once the server has recorded its own version.
	testutil.WaitFor(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := pb.NewNodesClient(conn).Register(ctx, &pb.NodeRegisterRequest{Node: ghost})
		if status.Code(err) != codes.PermissionDenied {
			return fmt.Errorf("a registration without a secret on a strict agent: %v, want PermissionDenied", err)
		}
		return nil
	})
}
