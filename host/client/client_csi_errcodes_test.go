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

func (noControllers) Controller(pluginID string) (*csi.Client, error) {
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
