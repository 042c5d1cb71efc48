package hostpath

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// With NoPublish the controller does not advertise PUBLISH_UNPUBLISH_VOLUME
// (nor what rests on it) and answers the publish calls Unimplemented, as
// kubernetes-csi's hostpath plugin without --enable-attach; it still
// creates volumes.
func TestNoPublishAdvertisesNoAttachStep(t *testing.T) {
	p := startPlugin(t, Config{NodeID: "n1", StateDir: t.TempDir(), NoPublish: true})
	caps, err := p.ctrl.ControllerGetCapabilities(testCtx(t), &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	has := map[csi.ControllerServiceCapability_RPC_Type]bool{}
	for _, c := range caps.GetCapabilities() {
		has[c.GetRpc().GetType()] = true
	}
	for _, gone := range []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_READONLY, csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES} {
		if has[gone] {
			t.Errorf("advertises %s with NoPublish", gone)
		}
	}
	if !has[csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME] {
		t.Errorf("does not advertise CREATE_DELETE_VOLUME: %v", caps)
	}
	v := p.createVolume(t, "v", 1<<20, mountCap(snw))
	_, err = p.ctrl.ControllerPublishVolume(testCtx(t), &csi.ControllerPublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: "n1", VolumeCapability: mountCap(snw)})
	wantCode(t, err, codes.Unimplemented, "ControllerPublishVolume")
	_, err = p.ctrl.ControllerUnpublishVolume(testCtx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: "n1"})
	wantCode(t, err, codes.Unimplemented, "ControllerUnpublishVolume")
}
