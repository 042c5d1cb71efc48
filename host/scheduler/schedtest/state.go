package schedtest

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/rpc/pb"
)

// State is an in-memory snapshot for the scheduler. Build it with the Add
// methods; it implements scheduler.State. It is not safe for concurrent
// writes, and reads return the stored messages (do not modify them).
type State struct {
	index    uint64
	nodes    map[string]*pb.Node
	jobs     map[string]*pb.Job
	versions map[string]map[uint64]*pb.Job
	allocs   map[string]*pb.Allocation
	volumes  map[string]*pb.Volume
	hostVols map[string]*pb.HostVolume
	claims   map[string]*pb.Claim
	// attachments by volume ID, then node ID.
	attachments map[[2]string]*pb.Attachment
}

// NewState returns an empty snapshot at index 1.
func NewState() *State {
	return &State{
		index:    1,
		nodes:    map[string]*pb.Node{},
		jobs:     map[string]*pb.Job{},
		versions: map[string]map[uint64]*pb.Job{},
		allocs:   map[string]*pb.Allocation{},
		volumes:  map[string]*pb.Volume{},
		hostVols: map[string]*pb.HostVolume{},
		claims:   map[string]*pb.Claim{},

		attachments: map[[2]string]*pb.Attachment{},
	}
}

// SetIndex sets the snapshot's index.
func (s *State) SetIndex(i uint64) { s.index = i }

// AddNode stores (or replaces) a node.
func (s *State) AddNode(n *pb.Node) { s.nodes[n.GetId()] = n }

// AddJob stores the job as its current version and in its history.
func (s *State) AddJob(j *pb.Job) {
	s.jobs[j.GetId()] = j
	s.AddJobVersion(j)
}

// AddJobVersion stores a job version in the history only.
func (s *State) AddJobVersion(j *pb.Job) {
	if s.versions[j.GetId()] == nil {
		s.versions[j.GetId()] = map[uint64]*pb.Job{}
	}
	s.versions[j.GetId()][j.GetVersion()] = j
}

// PurgeJob removes the job and its history, keeping its allocs.
func (s *State) PurgeJob(id string) {
	delete(s.jobs, id)
	delete(s.versions, id)
}

// AddAlloc stores (or replaces) an alloc.
func (s *State) AddAlloc(a *pb.Allocation) { s.allocs[a.GetId()] = a }

// AddVolume stores (or replaces) a volume.
func (s *State) AddVolume(v *pb.Volume) { s.volumes[v.GetId()] = v }

// AddClaim stores (or replaces) a claim.
func (s *State) AddClaim(c *pb.Claim) { s.claims[c.GetId()] = c }

// FreeClaim removes a claim, as the state machine does when it is freed.
func (s *State) FreeClaim(id string) { delete(s.claims, id) }

// AddAttachment stores (or replaces) a volume's attachment to a node.
func (s *State) AddAttachment(a *pb.Attachment) {
	s.attachments[[2]string{a.GetVolumeId(), a.GetNodeId()}] = a
}

// RemoveAttachment removes a volume's attachment to a node, as the state
// machine does when its controller unpublish succeeded.
func (s *State) RemoveAttachment(volumeID, nodeID string) {
	delete(s.attachments, [2]string{volumeID, nodeID})
}

// Claims returns every stored claim, by ID.
func (s *State) Claims() []*pb.Claim {
	return s.filterClaims(func(*pb.Claim) bool { return true })
}

// Alloc returns a stored alloc or nil.
func (s *State) Alloc(id string) *pb.Allocation { return s.allocs[id] }

// Apply applies a plan as the plan command would (without its re-check):
// stops change desired and client status and follow-up links, allocs are
// stored (in-place updates replace the row), and a replaced alloc gets its
// next_allocation, and the plan's claims are stored (ready) while a
// stopped alloc's claims move to releasing (they hold their volume until
// a test frees them). It lets tests run several evaluations in a row.
func (s *State) Apply(p *pb.Plan) {
	s.index++
	for _, st := range p.GetStops() {
		a := s.allocs[st.GetAllocId()]
		if a == nil {
			continue
		}
		a = proto.Clone(a).(*pb.Allocation)
		a.DesiredStatus = st.GetDesiredStatus()
		a.DesiredDescription = st.GetDesiredDescription()
		if st.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_UNSPECIFIED {
			a.ClientStatus = st.GetClientStatus()
		}
		if st.GetFollowupEvalId() != "" {
			a.FollowupEvalId = st.GetFollowupEvalId()
		}
		a.ModifyIndex = s.index
		s.allocs[a.GetId()] = a
		if a.GetDesiredStatus() == pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN {
			continue
		}
		for _, c := range s.filterClaims(func(c *pb.Claim) bool { return c.GetAllocId() == a.GetId() }) {
			c = proto.Clone(c).(*pb.Claim)
			c.State = pb.ClaimState_CLAIM_STATE_RELEASING
			s.claims[c.GetId()] = c
		}
	}
	for _, c := range p.GetClaims() {
		c = proto.Clone(c).(*pb.Claim)
		c.State = pb.ClaimState_CLAIM_STATE_READY
		c.CreateIndex, c.ModifyIndex = s.index, s.index
		s.claims[c.GetId()] = c
	}
	for _, a := range p.GetAllocs() {
		a = proto.Clone(a).(*pb.Allocation)
		if old := s.allocs[a.GetId()]; old != nil {
			a.CreateIndex = old.GetCreateIndex()
		} else {
			a.CreateIndex = s.index
		}
		a.ModifyIndex = s.index
		s.allocs[a.GetId()] = a
		if prev := s.allocs[a.GetPreviousAllocation()]; prev != nil {
			prev = proto.Clone(prev).(*pb.Allocation)
			prev.NextAllocation = a.GetId()
			s.allocs[prev.GetId()] = prev
		}
	}
}

// Index implements scheduler.State.
func (s *State) Index() uint64 { return s.index }

// Nodes implements scheduler.State, in ID order.
func (s *State) Nodes() ([]*pb.Node, error) {
	out := make([]*pb.Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out, nil
}

// Node implements scheduler.State.
func (s *State) Node(id string) (*pb.Node, error) { return s.nodes[id], nil }

// Job implements scheduler.State.
func (s *State) Job(id string) (*pb.Job, error) { return s.jobs[id], nil }

// JobVersion implements scheduler.State.
func (s *State) JobVersion(id string, v uint64) (*pb.Job, error) {
	return s.versions[id][v], nil
}

// AllocsByJob implements scheduler.State, in ID order.
func (s *State) AllocsByJob(jobID string) ([]*pb.Allocation, error) {
	return s.filter(func(a *pb.Allocation) bool { return a.GetJobId() == jobID }), nil
}

// AllocsByNode implements scheduler.State, in ID order.
func (s *State) AllocsByNode(nodeID string) ([]*pb.Allocation, error) {
	return s.filter(func(a *pb.Allocation) bool { return a.GetNodeId() == nodeID }), nil
}

// Volume implements scheduler.State.
func (s *State) Volume(id string) (*pb.Volume, error) { return s.volumes[id], nil }

// AddHostVolume stores (or replaces) a dynamic host volume.
func (s *State) AddHostVolume(v *pb.HostVolume) { s.hostVols[v.GetId()] = v }

// HostVolume implements scheduler.State.
func (s *State) HostVolume(id string) (*pb.HostVolume, error) { return s.hostVols[id], nil }

// ClaimsByVolume implements scheduler.State, in ID order.
func (s *State) ClaimsByVolume(volumeID string) ([]*pb.Claim, error) {
	return s.filterClaims(func(c *pb.Claim) bool { return c.GetVolumeId() == volumeID }), nil
}

// ClaimsByNode implements scheduler.State, in ID order.
func (s *State) ClaimsByNode(nodeID string) ([]*pb.Claim, error) {
	return s.filterClaims(func(c *pb.Claim) bool { return c.GetNodeId() == nodeID }), nil
}

// Attachment implements scheduler.State.
func (s *State) Attachment(volumeID, nodeID string) (*pb.Attachment, error) {
	return s.attachments[[2]string{volumeID, nodeID}], nil
}

func (s *State) filterClaims(keep func(*pb.Claim) bool) []*pb.Claim {
	var out []*pb.Claim
	for _, c := range s.claims {
		if keep(c) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out
}

func (s *State) filter(keep func(*pb.Allocation) bool) []*pb.Allocation {
	var out []*pb.Allocation
	for _, a := range s.allocs {
		if keep(a) {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out
}

// Seq returns an ID generator that yields prefix-1, prefix-2, ...: stable
// IDs for tests and benchmarks (the scheduler takes IDs, it makes none).
func Seq(prefix string) func() string {
	n := 0
	return func() string {
		n++
		return fmt.Sprintf("%s-%d", prefix, n)
	}
}

var _ scheduler.State = (*State)(nil)
