package server

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/metadata"

	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// TestServerOnlyMethods pins which calls need a server certificate under
// verify_server_hostname: the servers' own services and joins, and any
// forwarded request; a node's and an API user's calls do not.
func TestServerOnlyMethods(t *testing.T) {
	plain := context.Background()
	for _, m := range []string{
		pb.Operator_Join_FullMethodName,
		pb.TunnelPeers_Locate_FullMethodName, pb.TunnelPeers_Release_FullMethodName,
		pb.CSIRelay_ControllerCall_FullMethodName, pb.CSIRelay_NodeDetachVolume_FullMethodName, pb.CSIRelay_NodeExpandVolume_FullMethodName,
	} {
		if !isServerOnly(plain, m) {
			t.Errorf("%s is not server-only", m)
		}
	}
	clientFacing := []string{
		pb.Nodes_Register_FullMethodName, pb.Nodes_Heartbeat_FullMethodName, pb.ClientAllocs_Watch_FullMethodName,
		pb.ClientAllocs_Update_FullMethodName, pb.Tunnel_Open_FullMethodName, pb.CSIPlugins_UpdateNode_FullMethodName,
		pb.Jobs_Register_FullMethodName, pb.Operator_RemovePeer_FullMethodName, pb.Status_Ping_FullMethodName,
		pb.ClientProxy_Logs_FullMethodName,
	}
	for _, m := range clientFacing {
		if isServerOnly(plain, m) {
			t.Errorf("%s is server-only, but nodes and the HTTP API call it", m)
		}
	}
	// The same calls, marked as forwarded by a server, are server-only.
	fwd := metadata.NewIncomingContext(plain, metadata.Pairs(rpc.ForwardedHeader, "s1"))
	for _, m := range slices.Concat(clientFacing, []string{pb.Jobs_List_FullMethodName}) {
		if !isServerOnly(fwd, m) {
			t.Errorf("a forwarded %s is not server-only", m)
		}
	}
}
