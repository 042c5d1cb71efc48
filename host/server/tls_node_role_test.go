package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/rpc/pb"
)

// TestNodeMethods pins which calls, under verify_server_hostname, need a
// client or server certificate (a cli one is refused): the calls a node
// makes for itself, and no other.
func TestNodeMethods(t *testing.T) {
	for _, m := range []string{
		pb.Nodes_Register_FullMethodName, pb.Nodes_Heartbeat_FullMethodName,
		pb.ClientAllocs_Watch_FullMethodName, pb.ClientAllocs_Update_FullMethodName,
		pb.Claims_ClientClaim_FullMethodName, pb.Claims_ClientClaimUpdate_FullMethodName, pb.Claims_ClientClaims_FullMethodName,
		pb.CSIPlugins_UpdateNode_FullMethodName, pb.Tunnel_Open_FullMethodName,
	} {
		if !isNodeMethod(m) {
			t.Errorf("%s is not a node's method", m)
		}
	}
	for _, m := range []string{
		pb.Nodes_List_FullMethodName, pb.Nodes_Get_FullMethodName, pb.NodeOps_Readmit_FullMethodName,
		pb.Jobs_Register_FullMethodName, pb.Status_Ping_FullMethodName, pb.Operator_Join_FullMethodName,
		pb.ClientProxy_Logs_FullMethodName, "/no.such.Service/Method",
	} {
		if isNodeMethod(m) {
			t.Errorf("%s is a node's method, but the CLI and the HTTP API call it", m)
		}
	}
}

// Under verify_server_hostname a cli certificate cannot act as a node
// (heartbeat, register, open a tunnel); client and server certificates
// can, and the cli one still reaches the API.
func TestNodeCallsNeedAClientOrServerCertificate(t *testing.T) {
	ca, err := tlsconf.NewCA(tlsconf.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc := newTestCluster(t, 1, func(c *testConfig) { c.TLS = pkiStore(t, ca, tlsconf.RoleServer) })
	s := tc.waitLeader()
	dial := func(role tlsconf.Role) *grpc.ClientConn {
		t.Helper()
		conn, err := grpc.NewClient(s.cfg.RPCAddr, tlsconf.DialOptions(pkiStore(t, ca, role))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	roleRefused := func(err error) bool {
		return status.Code(err) == codes.PermissionDenied && strings.Contains(err.Error(), ErrNodeRole.Error())
	}
	n := workNode("n1")
	cli := dial(tlsconf.RoleCLI)
	_, err = pb.NewNodesClient(cli).Heartbeat(ctx10s(t), &pb.NodeHeartbeatRequest{NodeId: n.GetId()})
	if !roleRefused(err) {
		t.Fatalf("heartbeat with a cli certificate: %v, want ErrNodeRole", err)
	}
	_, err = pb.NewNodesClient(cli).Register(ctx10s(t), &pb.NodeRegisterRequest{Node: n})
	if !roleRefused(err) {
		t.Fatalf("register with a cli certificate: %v, want ErrNodeRole", err)
	}
	st, err := pb.NewTunnelClient(cli).Open(ctx10s(t))
	if err == nil {
		_, err = st.Recv()
	}
	if !roleRefused(err) {
		t.Fatalf("tunnel with a cli certificate: %v, want ErrNodeRole", err)
	}
	if _, err := pb.NewNodesClient(cli).List(context.Background(), &pb.NodeListRequest{}); err != nil {
		t.Fatalf("node list with a cli certificate: %v", err)
	}
	for _, role := range []tlsconf.Role{tlsconf.RoleClient, tlsconf.RoleServer} {
		_, err := pb.NewNodesClient(dial(role)).Heartbeat(ctx10s(t), &pb.NodeHeartbeatRequest{NodeId: n.GetId()})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("heartbeat of an unknown node with a %s certificate: %v, want NotFound", role, err)
		}
	}
}
