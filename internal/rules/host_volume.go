package rules

import "berth.dev/berth/rpc/pb"

// HostVolumeClaimView is a dynamic host volume as CheckClaim judges claims
// on it: its ID, its capabilities (the access and attachment modes its
// claims may use), deleting while `volume delete` is under way. Claims on
// host volumes live in the claims table with CSI volumes' and follow the
// same access-mode rules; only the volume they name lives elsewhere.
func HostVolumeClaimView(hv *pb.HostVolume) *pb.Volume {
	return &pb.Volume{
		Id:           hv.GetId(),
		Name:         hv.GetName(),
		Capabilities: hv.GetCapabilities(),
		Schedulable:  hv.GetState() == pb.HostVolumeState_HOST_VOLUME_STATE_READY,
		Deleting:     hv.GetState() == pb.HostVolumeState_HOST_VOLUME_STATE_DELETING,
	}
}

// HostClaim reports whether a claim is on a dynamic host volume (its
// request is a group volume of type "host").
func HostClaim(c *pb.Claim) bool { return c.GetRequest().GetType() == "host" }
