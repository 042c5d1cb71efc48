package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/host/server/volumeloops"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// csiNode is a hand-written ClientCSI: the client's own path (decode the
// allow-listed request, csi.Client.Invoke on the plugin) over a csifake
// plugin, without the plugin manager.
type csiNode struct {
	pb.UnimplementedClientCSIServer
	nodeID string
	plugin string
	c      *csi.Client
	// instance, when set, is what the node serves the plugin with: a
	// call addressed to another (CSIControllerCallRequest.expect) is
	// refused as the client refuses it. Unset, the node is one older
	// than the field, which ignores it.
	instance *pb.CSIPluginInfo
}

func (n *csiNode) ControllerCall(ctx context.Context, req *pb.CSIControllerCallRequest) (*pb.CSIControllerCallResponse, error) {
	if req.GetPluginId() != n.plugin {
		return nil, status.Errorf(codes.NotFound, "csi plugin %q on node %s: no controller instance", req.GetPluginId(), n.nodeID)
	}
	if n.instance != nil {
		if err := csi.CheckInstance(req.GetExpect(), n.instance); err != nil {
			return nil, csi.InstanceChangedStatus(fmt.Errorf("csi plugin %q on node %s: %w", n.plugin, n.nodeID, err))
		}
	}
	m, ok := csi.ForwardedMethodOf(req.GetMethod())
	if !ok {
		return nil, status.Errorf(codes.PermissionDenied, "method %q", req.GetMethod())
	}
	in, out := m.NewRequest(), m.NewResponse()
	if err := proto.Unmarshal(req.GetRequest(), in); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := n.c.Invoke(ctx, req.GetMethod(), in, out); err != nil {
		st := status.Convert(err)
		return nil, status.Errorf(st.Code(), "csi plugin %q on node %s: %s", n.plugin, n.nodeID, st.Message())
	}
	b, err := proto.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &pb.CSIControllerCallResponse{Response: b}, nil
}

// connectCSINode serves a fake plugin as pluginID's controller on nodeID,
// over the node's tunnel to servers.
func connectCSINode(t *testing.T, nodeID, pluginID string, p *csifake.Plugin, servers ...*Server) {
	t.Helper()
	srv, err := p.Listen(filepath.Join(shortTempDir(t), "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("unix://"+srv.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	node := &csiNode{nodeID: nodeID, plugin: pluginID, c: csi.New(cc)}
	pool := testNodePool()
	t.Cleanup(pool.Close)
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.cfg.RPCAddr)
	}
	c, err := tunnel.Start(tunnel.ClientConfig{
		NodeID:   nodeID,
		Servers:  func() []string { return addrs },
		Conn:     pool.Conn,
		Register: func(r grpc.ServiceRegistrar) { pb.RegisterClientCSIServer(r, node) },
		Backoff:  backoff.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Logger:   testutil.Logger(t).Named("node"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, s := range servers[:1] {
		waitTunnel(t, s, nodeID)
	}
}

func shortTempDir(t *testing.T) string {
	t.Helper()
	// Unix socket paths are short: t.TempDir's can be too long.
	d, err := os.MkdirTemp("", "fwd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// A controller call reaches the plugin on the node from the server holding
// its tunnel and from another server, and the plugin's gRPC code comes
// back intact (final and uncertain alike), the message naming plugin and
// node; an unreachable node is Unavailable; a method off the allow-list
// never reaches the node.
func TestCSIForwardKeepsThePluginsCode(t *testing.T) {
	tc := newTestCluster(t, 2)
	a, b := tc.servers[0], tc.servers[1]
	waitMembers(t, b, 2)
	p := csifake.New()
	connectCSINode(t, "node-a", "ebs", p, a)
	if _, ok := b.tunnels.Session("node-a"); ok {
		t.Fatal("the node is connected to b too; the test needs it on a only")
	}
	for _, s := range []*Server{a, b} {
		f := s.csi
		p.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "vol-1", CapacityBytes: 42}}, nil)
		resp := &csipb.CreateVolumeResponse{}
		err := f.ControllerCall(ctx10s(t), "node-a", "ebs", nil, csipb.Controller_CreateVolume_FullMethodName, &csipb.CreateVolumeRequest{Name: "data"}, resp)
		if err != nil || resp.GetVolume().GetVolumeId() != "vol-1" || resp.GetVolume().GetCapacityBytes() != 42 {
			t.Fatalf("create through %s: %v, %v", s.cfg.Name, resp, err)
		}
		if got := p.CreateVolume.Last().GetName(); got != "data" {
			t.Fatalf("the plugin got name %q", got)
		}
		for _, code := range []codes.Code{codes.NotFound, codes.ResourceExhausted, codes.Aborted, codes.FailedPrecondition, codes.Internal} {
			p.ControllerPublishVolume.Next(nil, status.Errorf(code, "publish refused: %s", code))
			err := f.ControllerCall(ctx10s(t), "node-a", "ebs", nil, csipb.Controller_ControllerPublishVolume_FullMethodName,
				&csipb.ControllerPublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-a"}, &csipb.ControllerPublishVolumeResponse{})
			if errcode.Code(err) != code || status.Code(err) != code {
				t.Fatalf("through %s: %v (errcode %s, status %s), want %s", s.cfg.Name, err, errcode.Code(err), status.Code(err), code)
			}
			for _, want := range []string{"publish refused: " + code.String(), `csi plugin "ebs" on node node-a`} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("through %s: %q lacks %q", s.cfg.Name, err, want)
				}
			}
			if s == b && !strings.Contains(err.Error(), "via server "+a.cfg.Name) {
				t.Errorf("through b: %q does not name the server it went through", err)
			}
		}
		err = f.ControllerCall(ctx10s(t), "node-a", "ebs", nil, csipb.Node_NodeStageVolume_FullMethodName, &csipb.NodeStageVolumeRequest{}, &csipb.NodeStageVolumeResponse{})
		if errcode.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "node-a") {
			t.Errorf("node call through %s: %v, want PermissionDenied naming the node", s.cfg.Name, err)
		}
	}
	if n := p.NodeStageVolume.Count(); n != 0 {
		t.Errorf("the plugin saw %d node stage calls", n)
	}
	err := b.csi.ControllerCall(ctx10s(t), "nowhere", "ebs", nil, csipb.Controller_DeleteVolume_FullMethodName,
		&csipb.DeleteVolumeRequest{VolumeId: "v"}, &csipb.DeleteVolumeResponse{})
	if errcode.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("node connected nowhere: %v, want Unavailable naming it", err)
	}
	// The typed CSI client over the forwarder classes by the plugin's code.
	p.DeleteVolume.Next(nil, status.Error(codes.NotFound, "gone"))
	if _, err := volumeloops.ClientVia(b.csi, b.logger, "node-a", "ebs", nil).Controller.DeleteVolume(ctx10s(t), &csipb.DeleteVolumeRequest{VolumeId: "v"}); err != nil {
		t.Errorf("NotFound on delete through the forwarder is success: %v", err)
	}
	p.ControllerPublishVolume.Next(nil, status.Error(codes.Unavailable, "backend down"))
	_, err = volumeloops.ClientVia(b.csi, b.logger, "node-a", "ebs", nil).Controller.ControllerPublishVolume(ctx10s(t),
		&csipb.ControllerPublishVolumeRequest{VolumeId: "v", NodeId: "n", VolumeCapability: &csipb.VolumeCapability{}})
	if !csi.IsUncertain(err) {
		t.Errorf("Unavailable from the plugin through the forwarder: %v, want uncertain", err)
	}
}

func TestCSIRelayMethodsHaveRoutes(t *testing.T) {
	for _, sd := range []grpc.ServiceDesc{pb.CSIRelay_ServiceDesc, pb.Volumes_ServiceDesc} {
		for _, m := range methodNames(sd.Methods) {
			full := "/" + sd.ServiceName + "/" + m
			if _, ok := routes[full]; !ok {
				t.Errorf("%s has no route", full)
			}
			if _, err := newReply(full); err != nil {
				t.Errorf("newReply(%s): %v", full, err)
			}
		}
	}
	if routes[pb.CSIRelay_ControllerCall_FullMethodName] != routeLocal {
		t.Error("CSIRelay must be served locally: it answers from this server's tunnels")
	}
}

// An unmarked relay call is refused: relays are one hop, between servers.
func TestCSIRelayRefusesUnforwardedCalls(t *testing.T) {
	tc := newTestCluster(t, 1)
	_, err := pb.NewCSIRelayClient(tc.conn(tc.servers[0])).ControllerCall(ctx10s(t), &pb.CSIControllerCallRequest{
		NodeId: "n", PluginId: "p", Method: csipb.Controller_DeleteVolume_FullMethodName})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("unforwarded relay: %v, want PermissionDenied", err)
	}
}
