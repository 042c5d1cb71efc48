package endpoints

import (
	"context"
	"fmt"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/csi"
	"berth.dev/berth/host/server/volumeloops"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// createAttempts bounds the CreateVolume calls one volume create makes
// while they fail uncertain (csi.DefaultRetry's backoff between them).
const createAttempts = 5

// ErrCreateControllerChanged is returned by a volume create whose
// CreateVolume failed uncertain when the controller that would take the
// next try is not the instance the uncertain one went to: the volume may
// exist on that instance's backend, and another would make a second one.
var ErrCreateControllerChanged = errcode.New(codes.FailedPrecondition, "the controller instance serving the plugin changed during the create")

// createVolume sends CreateVolume through a controller of the volume's
// plugin that advertises CREATE_DELETE_VOLUME. A failure whose outcome is
// uncertain (Unavailable, a timeout: the call may have made the volume) is
// tried again with backoff, but only through the same instance (node,
// alloc, source): CreateVolume is idempotent by name within one backend,
// and another instance of the plugin ID (a task plugin that replaced a
// storage adapter, a controller on another node in front of another
// backend) would make a second volume and leave the first one, made by the
// uncertain call, unknown to berth. The servers' state may lag the node,
// so the calls are addressed to the instance (CSIControllerCallRequest.
// expect) and the node refuses them when another serves the ID there. When
// the instance changed, by the servers' state or the node's refusal, the
// create fails, naming the instance that may hold a volume. (A client
// older than the expect field ignores it and sends the retry to whatever
// serves the ID: only the servers' check holds there.) A final failure
// (ResourceExhausted included: for CreateVolume it is "no room", CSI
// spec), or no controller that can, is returned at once, naming the
// volume, the plugin and the node.
func (e *volumesEndpoint) createVolume(ctx context.Context, v *pb.Volume, req *csipb.CreateVolumeRequest) (resp *csipb.CreateVolumeResponse, nodeID string, err error) {
	c, nodeID, first, err := e.controller(v.GetPluginId(), volumeloops.CapCreateDelete)
	if err != nil {
		return nil, "", fmt.Errorf("creating volume %q: %w", v.GetId(), err)
	}
	clock := sleepClock{e.s.Clock}
	log := e.s.Logger.Named("csi")
	retry := csi.DefaultRetry()
	wait := backoff.Backoff{Initial: retry.Initial, Max: retry.Max}
	for attempt := 1; ; attempt++ {
		resp, err := c.Controller.CreateVolume(ctx, req)
		if err == nil {
			return resp, nodeID, nil
		}
		if csi.InstanceChanged(err) {
			// The node serves the plugin ID with another instance than
			// the servers' state shows (its report has not been applied
			// yet) and refused the call: c's calls are for the first
			// instance only (controller). No call was made this time,
			// but an earlier uncertain one may have made the volume.
			if attempt == 1 {
				return nil, nodeID, fmt.Errorf("creating volume %q with plugin %q on node %s: %w: %w (nothing was created: run create again once the servers see the node's instance)",
					v.GetId(), v.GetPluginId(), nodeID, ErrCreateControllerChanged, err)
			}
			return nil, nodeID, fmt.Errorf("creating volume %q: %w after an uncertain CreateVolume through %s: the node refused the retry (%v): not retried through another instance, which may be another backend; the first call may have made the volume there: run create again once it serves, or check that backend",
				v.GetId(), ErrCreateControllerChanged, volumeloops.DescribeInstance(nodeID, first), err)
		}
		err = fmt.Errorf("creating volume %q with plugin %q on node %s: %w", v.GetId(), v.GetPluginId(), nodeID, err)
		// The call table decides: ResourceExhausted from CreateVolume is
		// the plugin's answer that it has no room (CSI spec), final.
		if !csi.CallCreateVolume.Retryable(err) {
			return nil, nodeID, err
		}
		if attempt >= createAttempts {
			return nil, nodeID, fmt.Errorf("%w (gave up after %d attempts)", err, attempt)
		}
		log.Warn("volume create: CreateVolume failed uncertain, retrying through the same instance",
			"volume", v.GetId(), "plugin", v.GetPluginId(), "node", nodeID, "attempt", attempt, "backoff", wait.Delay(attempt), "error", err)
		if serr := clock.Sleep(ctx, wait.Delay(attempt)); serr != nil {
			return nil, nodeID, fmt.Errorf("%w (gave up after %d attempts: %w)", err, attempt, serr)
		}
		if serr := e.sameCreateController(v.GetPluginId(), nodeID, first); serr != nil {
			return nil, nodeID, fmt.Errorf("creating volume %q: %w (last try: %v)", v.GetId(), serr, err)
		}
	}
}

// sameCreateController checks, before a create is tried again, that the
// controller the picker would choose now is the instance the uncertain
// try went to; otherwise it is a FailedPrecondition naming that instance,
// which may hold the volume.
func (e *volumesEndpoint) sameCreateController(pluginID, nodeID string, first *pb.CSIPluginInfo) error {
	nowNode, now, _, err := controllerFor(e.s.State().Snapshot(), pluginID, volumeloops.CapCreateDelete)
	if err == nil && nowNode == nodeID && now.GetAllocId() == first.GetAllocId() && now.GetSource() == first.GetSource() {
		return nil
	}
	why := "it is not usable now"
	if err == nil {
		why = "the picker would send the retry to " + volumeloops.DescribeInstance(nowNode, now)
	}
	return fmt.Errorf("%w after an uncertain CreateVolume through %s (%s): not retried through another instance, which may be another backend; the first call may have made the volume there: run create again once it serves, or check that backend",
		ErrCreateControllerChanged, volumeloops.DescribeInstance(nodeID, first), why)
}

// sleepClock is a csi.Clock on the server's Clock, so tests that drive
// time drive the create's backoff too.
type sleepClock struct{ c clock.Clock }

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
