package client

import (
	"context"
	"fmt"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/pluginmanager"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func TestCSISentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrNoCSIPlugins:     codes.FailedPrecondition,
		ErrBadCSICall:       codes.InvalidArgument,
		ErrNoControllerHere: codes.Unavailable,
	})
}

// noControllers is a plugin manager with no controller instance.
type noControllers struct{}

func (noControllers) ControllerOf(pluginID string, _ *pb.CSIControllerInstance) (*csi.Client, error) {
	return nil, fmt.Errorf("csi plugin %q: %w", pluginID, pluginmanager.ErrNoController)
}

// A call for a plugin whose controller is not (or no longer) on the node
// is Unavailable, naming plugin and node. It was the plugin manager's
// NotFound (TestVolumeMove's drain move saw it on a publish, the leader
// having picked the controller a drain had just stopped), which the
// servers take from a ControllerUnpublishVolume for the plugin's "not
// published": the attachment would be removed with nothing unpublished.
func TestControllerCallWithoutTheControllerIsUnavailable(t *testing.T) {
	r := &clientCSI{nodeID: "n1", plugins: func() controllers { return noControllers{} }}
	b, err := proto.Marshal(&csipb.ControllerUnpublishVolumeRequest{VolumeId: "v1", NodeId: "csi-n2"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.ControllerCall(context.Background(), &pb.CSIControllerCallRequest{
		NodeId: "n1", PluginId: "ebs", Method: csipb.Controller_ControllerUnpublishVolume_FullMethodName, Request: b,
	})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), `csi plugin "ebs"`) || !strings.Contains(st.Message(), "n1") {
		t.Fatalf("ControllerCall without the controller: %v, want Unavailable naming plugin ebs and node n1", err)
	}
}

// switchedControllers is a plugin manager whose instance of every plugin
// is the task plugin of alloc a9.
type switchedControllers struct{}

func (switchedControllers) ControllerOf(pluginID string, expect *pb.CSIControllerInstance) (*csi.Client, error) {
	err := csi.CheckInstance(expect, &pb.CSIPluginInfo{Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK, AllocId: "a9"})
	if err == nil {
		err = fmt.Errorf("csi plugin %q: %w", pluginID, pluginmanager.ErrNoController)
	}
	return nil, err
}

// A call addressed to another instance than the node's is refused with
// FailedPrecondition marked as csi.ErrControllerInstanceChanged on the
// wire, so the servers tell it from a plugin's own FailedPrecondition.
func TestControllerCallForAnotherInstanceIsRefusedMarked(t *testing.T) {
	r := &clientCSI{nodeID: "n1", plugins: func() controllers { return switchedControllers{} }}
	b, err := proto.Marshal(&csipb.CreateVolumeRequest{Name: "db"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.ControllerCall(context.Background(), &pb.CSIControllerCallRequest{
		NodeId: "n1", PluginId: "hp", Method: csipb.Controller_CreateVolume_FullMethodName, Request: b,
		Expect: &pb.CSIControllerInstance{Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER},
	})
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || !csi.InstanceChanged(st.Err()) {
		t.Fatalf("ControllerCall for the adapter on a node serving a task plugin: %v, want FailedPrecondition marked ErrControllerInstanceChanged", err)
	}
	for _, want := range []string{`csi plugin "hp"`, "node n1", "storage adapter", "task plugin of alloc a9"} {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("message %q does not name %q", st.Message(), want)
		}
	}
	if csi.InstanceChanged(status.Error(codes.FailedPrecondition, "volume published to another node")) {
		t.Error("a plugin's own FailedPrecondition reads as an instance change")
	}
}
