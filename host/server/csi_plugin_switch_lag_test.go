package server

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// switchingNode is a client whose plugin manager serves a controller call
// with whatever instance serves the plugin ID on the node now: `cur` is
// swapped when a task plugin replaces the storage adapter, before the
// node's next NodeCSIUpdate reaches the servers.
type switchingNode struct {
	pb.UnimplementedClientCSIServer
	cur atomic.Pointer[csiNode]
}

func (n *switchingNode) ControllerCall(ctx context.Context, req *pb.CSIControllerCallRequest) (*pb.CSIControllerCallResponse, error) {
	return n.cur.Load().ControllerCall(ctx, req)
}

// dialFake serves p on a unix socket and returns a CSI client of it.
func dialFake(t *testing.T, p *csifake.Plugin) *csi.Client {
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
	return csi.New(cc)
}

// The servers' "same instance" check before a create's retry reads their
// state, which can lag the node: an adapter's CreateVolume times out, the
// node switches to a task plugin of the same ID, and the retry goes out
// before the node's report of the switch is applied. The retry is
// addressed to the adapter instance (CSIControllerCallRequest.expect), so
// the node refuses it instead of sending it to the task plugin's backend
// (a second volume, the first orphaned): the create fails with
// ErrCreateControllerChanged naming the adapter, and the task plugin gets
// no CreateVolume.
func TestVolumeCreateRetryIsRefusedByANodeThatSwitchedInstanceBeforeReporting(t *testing.T) {
	adapter, task := csifake.New(), csifake.New()
	tc := newTestCluster(t, 1, withVersion(version.Version))
	s := tc.servers[0]
	n := testNode("n1")
	if _, err := tc.register(s, n); err != nil {
		t.Fatal(err)
	}
	ctl := &pb.CSIControllerInfo{SupportsCreateDelete: true, SupportsAttachDetach: true}
	adapterInfo := &pb.CSIPluginInfo{Healthy: true, Provider: "hostpath.berth.dev", Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER,
		ControllerRequired: true, ControllerInfo: ctl}
	taskInfo := &pb.CSIPluginInfo{Healthy: true, Provider: "hostpath.csi.k8s.io", Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK, AllocId: "a9",
		ControllerInfo: ctl}
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"hp": adapterInfo},
		Nodes:       map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.berth.dev", Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER}},
	})
	vols := pb.NewVolumesClient(tc.conn(s))
	sw := &switchingNode{}
	sw.cur.Store(&csiNode{nodeID: n.GetId(), plugin: "hp", c: dialFake(t, adapter), instance: adapterInfo})
	taskNode := &csiNode{nodeID: n.GetId(), plugin: "hp", c: dialFake(t, task), instance: taskInfo}
	pool := testNodePool()
	t.Cleanup(pool.Close)
	c, err := tunnel.Start(tunnel.ClientConfig{
		NodeID: n.GetId(), Servers: func() []string { return []string{s.cfg.RPCAddr} }, Conn: pool.Conn,
		Register: func(r grpc.ServiceRegistrar) { pb.RegisterClientCSIServer(r, sw) },
		Backoff:  backoff.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}, Logger: testutil.Logger(t).Named("node"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	waitTunnel(t, s, n.GetId())
	adapter.CreateVolume.Next(nil, status.Error(codes.DeadlineExceeded, "timed out"))

	v := fsVolume("db")
	v.ExternalId = ""
	done := make(chan error, 1)
	go func() {
		_, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: v})
		done <- err
	}()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if adapter.CreateVolume.Count() != 1 {
			return errors.New("no CreateVolume on the adapter yet")
		}
		return nil
	})
	// The node switches to the task plugin; its NodeCSIUpdate has not
	// reached the servers yet.
	sw.cur.Store(taskNode)
	testutil.WaitFor(t, 10*time.Second, func() error {
		select {
		case err = <-done:
			return nil
		default:
			tc.clock.Advance(100 * time.Millisecond)
			return errors.New("the create has not answered")
		}
	})
	if got := task.CreateVolume.Count(); got > 0 {
		t.Fatalf("create answered %v after an uncertain CreateVolume on the adapter and %d on the task plugin's backend: "+
			"the retry went to another backend although it was addressed to the adapter", err, got)
	}
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), endpoints.ErrCreateControllerChanged.Error()) {
		t.Fatalf("create after the node switched instance: %v, want ErrCreateControllerChanged (FailedPrecondition)", err)
	}
	for _, want := range []string{"node " + n.GetId(), "storage adapter", `volume "db"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
