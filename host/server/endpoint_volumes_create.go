package server

import (
	"context"
	"fmt"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc/pb"
)

// createAttempts bounds the CreateVolume calls one volume create makes
// while they fail uncertain (csi.DefaultRetry's backoff between them).
const createAttempts = 5

// createVolume sends CreateVolume through a controller of the volume's
// plugin that advertises CREATE_DELETE_VOLUME. A failure whose outcome is
// uncertain (Unavailable: the instance the node served it from went away,
// as when a plugin ID switches instances; a timeout) is tried again with
// backoff, through the controller picked again then: CreateVolume is
// idempotent by name, so a volume the first call made is returned, not
// made twice. A final failure, or no controller that can, is returned at
// once, naming the volume, the plugin and the node.
func (e *volumesEndpoint) createVolume(ctx context.Context, v *pb.Volume, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	r := csi.DefaultRetry()
	r.MaxAttempts = createAttempts
	r.Clock = sleepClock{e.s.cfg.Clock}
	r.Logger = e.s.logger.Named("csi")
	var resp *csipb.CreateVolumeResponse
	err := r.Do(ctx, csi.CallCreateVolume, req.GetName(), func(ctx context.Context) error {
		// Picked again each time, on the state as it is now. The picker's
		// refusals (no healthy controller, none that can create) are
		// FailedPrecondition: final, not retried.
		c, nodeID, _, err := e.controller(v.GetPluginId(), capCreateDelete)
		if err != nil {
			return fmt.Errorf("creating volume %q: %w", v.GetId(), err)
		}
		resp, err = c.Controller.CreateVolume(ctx, req)
		if err != nil {
			return fmt.Errorf("creating volume %q with plugin %q on node %s: %w", v.GetId(), v.GetPluginId(), nodeID, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// sleepClock is a csi.Clock on the server's Clock, so tests that drive
// time drive the create's backoff too.
type sleepClock struct{ c Clock }

var _ csi.Clock = sleepClock{}

func (s sleepClock) Sleep(ctx context.Context, d time.Duration) error {
	done := make(chan struct{})
	t := s.c.AfterFunc(d, func() { close(done) })
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
