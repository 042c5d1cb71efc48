package endpoints

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// promotePendingHostVolumes records ready each pending dynamic host volume
// of node n that n reports having (Node.host_volumes under the volume's
// name, with its ID): a create whose answer was lost (the node made it,
// the servers kept it pending) resolves when the node registers, with no
// create again. Its path is what the node reports. A failure is returned
// for the caller to log: the registration stands, and the volume stays
// pending (a create again with its ID, or the next registration,
// resolves it). One recorded otherwise meanwhile (the create's answer,
// a delete) is left as it is.
func promotePendingHostVolumes(ctx context.Context, s *api, n *pb.Node) error {
	vols, err := s.State().HostVolumesByNode(nil, n.GetId())
	if err != nil {
		return err
	}
	for _, v := range vols {
		info := n.GetHostVolumes()[v.GetName()]
		if v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_PENDING || info == nil || info.GetId() != v.GetId() {
			continue
		}
		ready := proto.CloneOf(v)
		ready.State = pb.HostVolumeState_HOST_VOLUME_STATE_READY
		ready.HostPath = info.GetPath()
		ready.ModifiedAt = s.Clock.Now().UnixNano()
		// Only while still pending as read (mark_index): the node
		// registers as soon as it made the volume, before the create's
		// answer is recorded, which carries the plugin's capacity and
		// must not be overwritten by this read's stale copy.
		_, err := s.Apply(ctx, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: ready, MustExist: true, MarkIndex: v.GetModifyIndex()})
		if errors.Is(err, fsm.ErrHostVolumeNotPending) {
			continue
		}
		if err != nil {
			return fmt.Errorf("host volume %q (%s) on node %s: recording it ready as its node reports it: %w", v.GetName(), v.GetId(), n.GetId(), err)
		}
	}
	return nil
}

// heldHostVolumeIDs are the IDs of node's dynamic host volumes the
// servers hold, in any state (the registration's answer: the node stops
// advertising the others).
func heldHostVolumeIDs(s *api, nodeID string) ([]string, error) {
	vols, err := s.State().HostVolumesByNode(nil, nodeID)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(vols))
	for _, v := range vols {
		ids = append(ids, v.GetId())
	}
	return ids, nil
}
