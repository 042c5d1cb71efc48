package pluginmanager

import (
	"context"
	"errors"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/rpc/errcode"
)

// WaitNode waits, without polling, for the plugin's node instance to be
// registered and healthy, and hands out its client, its node capabilities
// and where it sees the staging base; Node refuses an unhealthy one with
// the reason and its code.
func TestWaitNodeWakesOnRegistration(t *testing.T) {
	p := csifake.New()
	srv := servePlugin(t, p)
	reg := registry.New(newMemStore())
	m, f := startManager(t, reg, nil, nil)

	if _, err := m.Node("p"); !errors.Is(err, ErrNoNode) || errcode.Code(err) != codes.NotFound {
		t.Fatalf("before registration: %v, want ErrNoNode NotFound", err)
	}
	got := make(chan NodePlugin, 1)
	errc := make(chan error, 1)
	go func() {
		np, err := m.WaitNode(context.Background(), "p")
		got <- np
		errc <- err
	}()
	r := registration(node, "p", "a1", srv.Endpoint, 10)
	r.StagePublishDir = "/local/csi"
	mustRegister(t, reg, r)
	var np NodePlugin
	select {
	case np = <-got:
	case <-time.After(waitLimit):
		t.Fatal("WaitNode did not return after the plugin registered")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if np.Client == nil || !np.Capabilities.Has(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) || np.StagePublishDir != "/local/csi" {
		t.Fatalf("node plugin %+v: want a client, STAGE_UNSTAGE and stage dir /local/csi", np)
	}
	if _, err := np.Client.Node.NodeUnpublishVolume(context.Background(), &csipb.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: "/t"}); err != nil {
		t.Fatal(err)
	}
	if p.NodeUnpublishVolume.Count() != 1 {
		t.Errorf("the plugin saw %d unpublish calls, want 1", p.NodeUnpublishVolume.Count())
	}

	if err := reg.SetHealth("a1", "p", false, "probe: not ready"); err != nil {
		t.Fatal(err)
	}
	f.waitDelivered(t, "unhealthy", func(s Set) error { return has(s.Nodes, "p", "a1", false) })
	if _, err := m.Node("p"); !errors.Is(err, ErrNodeUnhealthy) || errcode.Code(err) != codes.FailedPrecondition {
		t.Fatalf("unhealthy: %v, want ErrNodeUnhealthy FailedPrecondition", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := m.WaitNode(ctx, "p")
	if !errors.Is(err, ErrNodeUnhealthy) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitNode on an unhealthy plugin: %v, want ErrNodeUnhealthy and the deadline", err)
	}
}
