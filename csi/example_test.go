package csi_test

import (
	"context"
	"fmt"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/csi"
)

// stager is how a caller holds the client: a small interface, declared
// where it is used, for the one call it makes.
type stager interface {
	NodeStageVolume(context.Context, *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error)
}

var _ stager = (*csi.NodeClient)(nil)

// stage retries an uncertain failure until the context ends and surfaces a
// final one at once.
func stage(ctx context.Context, n stager, logger hclog.Logger, req *csipb.NodeStageVolumeRequest) error {
	r := csi.DefaultRetry()
	r.Logger = logger
	return r.Do(ctx, csi.CallNodeStageVolume, req.GetVolumeId(), func(ctx context.Context) error {
		_, err := n.NodeStageVolume(ctx, req)
		return err
	})
}

func Example() {
	logger := hclog.Default()
	c, err := csi.Dial("unix:///var/lib/berth/csi/plugins/a1/csi.sock",
		csi.WithLogger(logger),
		csi.WithTimeouts(csi.Timeouts{csi.CallNodeStageVolume: 5 * time.Minute}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	fp, err := c.Fingerprint(ctx)
	if err != nil {
		fmt.Println("fingerprint:", err)
		return
	}
	fmt.Println(fp.Info.Name, fp.Info.VendorVersion, "controller required:", fp.ControllerRequired())

	err = stage(ctx, c.Node, logger, &csipb.NodeStageVolumeRequest{
		VolumeId:          "vol-1",
		StagingTargetPath: "/var/lib/berth/csi/staging/hostpath/vol-1",
		VolumeCapability: &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
	})
	switch {
	case csi.IsFinal(err):
		fmt.Println("staging failed for good:", err)
	case err != nil:
		fmt.Println("staging outcome unknown, try again later:", err)
	}
}
