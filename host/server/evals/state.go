package evals

import (
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/rpc/pb"
)

// SchedulerState is the scheduler's view of a state snapshot (the
// workers', and the benchmarks' in bench).
func SchedulerState(snap *fsm.StateSnapshot) scheduler.State { return schedState{snap} }

// schedState adapts a state snapshot to what the scheduler reads.
type schedState struct{ snap *fsm.StateSnapshot }

var _ scheduler.State = schedState{}

func (s schedState) Index() uint64 {
	idx, _ := s.snap.LatestIndex()
	return idx
}
func (s schedState) Nodes() ([]*pb.Node, error)       { return s.snap.Nodes(nil) }
func (s schedState) Node(id string) (*pb.Node, error) { return s.snap.NodeByID(nil, id) }
func (s schedState) Job(id string) (*pb.Job, error)   { return s.snap.JobByID(nil, id) }
func (s schedState) JobVersion(id string, v uint64) (*pb.Job, error) {
	return s.snap.JobVersion(nil, id, v)
}
func (s schedState) AllocsByJob(id string) ([]*pb.Allocation, error) {
	return s.snap.AllocsByJob(nil, id)
}
func (s schedState) AllocsByNode(id string) ([]*pb.Allocation, error) {
	return s.snap.AllocsByNode(nil, id)
}
func (s schedState) Volume(id string) (*pb.Volume, error) { return s.snap.VolumeByID(nil, id) }

func (s schedState) HostVolume(id string) (*pb.HostVolume, error) {
	return s.snap.HostVolumeByID(nil, id)
}
func (s schedState) ClaimsByVolume(id string) ([]*pb.Claim, error) {
	return s.snap.ClaimsByVolume(nil, id)
}
func (s schedState) ClaimsByNode(id string) ([]*pb.Claim, error) {
	return s.snap.ClaimsByNode(nil, id)
}
func (s schedState) Attachment(volumeID, nodeID string) (*pb.Attachment, error) {
	return s.snap.Attachment(nil, volumeID, nodeID)
}
