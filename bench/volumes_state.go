package main

import (
	"bytes"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc/pb"
)

// volumeState says what the volumes section builds through the state
// machine. The empty state holds only what the measured plans touch: the
// target nodes, the target volumes and the job they place. The large state
// holds the same targets among nodes nodes and volumes volumes, plus jobs
// jobs of allocsPerJob allocs each, placed by plans, every tenth alloc
// holding a claim on a volume of its own while there are volumes left.
type volumeState struct {
	nodes, volumes, jobs, allocsPerJob int
	// targets is how many nodes and volumes the measured plans spread
	// over, round robin: node-0000.., tvol-0000...
	targets int
}

// builtState is a state built through the FSM, as snapshot bytes (what
// every measurement restores from) and its counts.
type builtState struct {
	snapshot []byte
	index    uint64
	allocs   int
	claims   int
	volumes  int
	nodes    int
}

// applier feeds commands to an FSM in raft batches, the way raft's FSM
// goroutine hands them over, and fails on any refusal.
type applier struct {
	f       *fsm.FSM
	index   uint64
	pending []*raft.Log
	kinds   []fsm.MessageType
}

func (a *applier) add(t fsm.MessageType, msg proto.Message) error {
	buf, err := fsm.Encode(t, msg)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", t, err)
	}
	a.index++
	a.pending = append(a.pending, &raft.Log{Index: a.index, Term: 1, Type: raft.LogCommand, Data: buf})
	a.kinds = append(a.kinds, t)
	if len(a.pending) == fsmOnlyBatch {
		return a.flush()
	}
	return nil
}

func (a *applier) flush() error {
	out := a.f.ApplyBatch(a.pending)
	for i, r := range out {
		res, ok := r.(*fsm.ApplyResult)
		if !ok || res == nil {
			return fmt.Errorf("%s at index %d: %w: %T", a.kinds[i], a.pending[i].Index, fsm.ErrUnexpectedResponse, r)
		}
		if res.Err != nil {
			return fmt.Errorf("%s at index %d: %w", a.kinds[i], a.pending[i].Index, res.Err)
		}
		if pr, ok := res.Response.(*pb.PlanResult); ok && len(pr.GetRefusedNodes()) > 0 {
			return fmt.Errorf("plan at index %d refused: %v", a.pending[i].Index, pr.GetRefusals())
		}
	}
	a.pending, a.kinds = a.pending[:0], a.kinds[:0]
	return nil
}

// benchVolumeNode is the dev node a client registers, with room for every
// alloc the section places.
func benchVolumeNode(captured *pb.Node, i int) *pb.Node {
	n := proto.Clone(captured).(*pb.Node)
	n.Id = volumeNodeID(i)
	n.Name = n.Id
	n.Status = pb.NodeStatus_NODE_STATUS_READY
	n.Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE
	n.Resources = &pb.NodeResources{CpuMhz: 1 << 40, MemoryMb: 1 << 40}
	return n
}

func volumeNodeID(i int) string   { return fmt.Sprintf("node-%04d", i) }
func targetVolumeID(i int) string { return fmt.Sprintf("tvol-%04d", i) }

func benchVolume(id string, mode pb.VolumeAccessMode) *pb.Volume {
	return &pb.Volume{Id: id, Name: id, PluginId: "nfs", ExternalId: "ext-" + id,
		Capabilities: []*pb.VolumeCapability{{AccessMode: mode, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}
}

func benchVolumeAlloc(id, job string, index int, node string) *pb.Allocation {
	return &pb.Allocation{
		Id: id, Name: fmt.Sprintf("%s.g[%d]", job, index), Index: int32(index), NodeId: node, JobId: job, TaskGroup: "g",
		Resources:     &pb.AllocResources{CpuMhz: 100, MemoryMb: 128, Tasks: map[string]*pb.TaskResources{"t": {CpuMhz: 100, MemoryMb: 128}}},
		DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN,
		ClientStatus:  pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING,
	}
}

func writeClaim(id, volume, alloc string, mode pb.VolumeAccessMode) *pb.Claim {
	return &pb.Claim{Id: id, VolumeId: volume, AllocId: alloc, Mode: pb.ClaimMode_CLAIM_MODE_WRITE,
		AccessMode: mode, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}
}

const (
	mnmwMode = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER
	snwMode  = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER
)

// build applies the state's commands to a fresh FSM and returns its
// snapshot. Target volumes are multi-node-multi-writer, so the measured
// plans never run out of claims; the others single-node-writer.
func (vs volumeState) build() (*builtState, error) {
	captured, err := devNode()
	if err != nil {
		return nil, err
	}
	a := &applier{f: fsm.New(hclog.NewNullLogger())}
	nodes := max(vs.nodes, vs.targets)
	for i := range nodes {
		if err := a.add(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: benchVolumeNode(captured, i)}); err != nil {
			return nil, err
		}
	}
	for i := range vs.targets {
		if err := a.add(fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: benchVolume(targetVolumeID(i), mnmwMode), RegisteredAt: 1}); err != nil {
			return nil, err
		}
	}
	others := max(vs.volumes-vs.targets, 0)
	for i := range others {
		if err := a.add(fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: benchVolume(fmt.Sprintf("vol-%05d", i), snwMode), RegisteredAt: 1}); err != nil {
			return nil, err
		}
	}
	if err := a.add(fsm.JobRegister, &pb.JobRegisterCommand{Job: benchJob("bench", 1)}); err != nil {
		return nil, err
	}
	built := &builtState{nodes: nodes, volumes: vs.targets + others}
	perJob := max(nodes/max(vs.jobs, 1), 1)
	claimed := 0
	for j := range vs.jobs {
		id := fmt.Sprintf("job-%03d", j)
		if err := a.add(fsm.JobRegister, &pb.JobRegisterCommand{Job: benchJob(id, int32(vs.allocsPerJob))}); err != nil {
			return nil, err
		}
		plan := &pb.Plan{EvalId: "setup-" + id, JobId: id}
		for i := range vs.allocsPerJob {
			alloc := uuid.Generate()
			node := volumeNodeID((j*perJob + i%perJob) % nodes)
			plan.Allocs = append(plan.Allocs, benchVolumeAlloc(alloc, id, i, node))
			if i%10 == 0 && claimed < others {
				plan.Claims = append(plan.Claims, writeClaim(uuid.Generate(), fmt.Sprintf("vol-%05d", claimed), alloc, snwMode))
				claimed++
			}
		}
		if err := a.add(fsm.PlanApply, &pb.PlanApplyCommand{Plan: plan, AppliedAt: 1}); err != nil {
			return nil, err
		}
		built.allocs += vs.allocsPerJob
	}
	if err := a.flush(); err != nil {
		return nil, err
	}
	built.claims = claimed
	built.index = a.index
	if built.snapshot, err = snapshotFSM(a.f); err != nil {
		return nil, err
	}
	return built, nil
}

// snapshotFSM persists f's snapshot into memory.
func snapshotFSM(f *fsm.FSM) ([]byte, error) {
	snap, err := f.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer snap.Release()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		return nil, fmt.Errorf("persisting snapshot: %w", err)
	}
	return sink.buf.Bytes(), nil
}

// restoreFSM returns a new FSM restored from snapshot bytes.
func restoreFSM(b []byte) (*fsm.FSM, error) {
	f := fsm.New(hclog.NewNullLogger())
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		return nil, fmt.Errorf("restoring snapshot: %w", err)
	}
	return f, nil
}

// memSink is a raft.SnapshotSink into memory.
type memSink struct{ buf bytes.Buffer }

var _ raft.SnapshotSink = (*memSink)(nil)

func (s *memSink) Write(p []byte) (int, error) { return s.buf.Write(p) }
func (s *memSink) Close() error                { return nil }
func (s *memSink) ID() string                  { return "bench" }
func (s *memSink) Cancel() error               { return nil }

// planProposals hands out the measured command: a plan of job "bench"
// placing one alloc with one write claim, round robin over the target
// nodes and volumes. Safe for concurrent proposers.
type planProposals struct {
	targets int
	n       atomic.Uint64
}

func (p *planProposals) next() []byte {
	k := int(p.n.Add(1))
	alloc := uuid.Generate()
	plan := &pb.Plan{EvalId: "bench-eval", JobId: "bench",
		Allocs: []*pb.Allocation{benchVolumeAlloc(alloc, "bench", k, volumeNodeID(k%p.targets))},
		Claims: []*pb.Claim{writeClaim(uuid.Generate(), targetVolumeID(k%p.targets), alloc, mnmwMode)},
	}
	buf, err := fsm.Encode(fsm.PlanApply, &pb.PlanApplyCommand{Plan: plan, AppliedAt: int64(k)})
	if err != nil {
		// A constant message shape: an error is a bug every run shows.
		panic(fmt.Sprintf("bench: encoding a plan: %v", err))
	}
	return buf
}

// checkPlanPlaced fails unless the FSM's answer says the plan placed its
// alloc and reserved its claim.
func checkPlanPlaced(resp any) error {
	res, ok := resp.(*fsm.ApplyResult)
	if !ok || res == nil {
		return fmt.Errorf("%w: %T", fsm.ErrUnexpectedResponse, resp)
	}
	if res.Err != nil {
		return res.Err
	}
	pr, _ := res.Response.(*pb.PlanResult)
	if pr.GetAppliedAllocs() != 1 || pr.GetAppliedClaims() != 1 {
		return fmt.Errorf("plan at index %d applied %d allocs and %d claims, want 1 and 1 (refusals: %v)",
			res.Index, pr.GetAppliedAllocs(), pr.GetAppliedClaims(), pr.GetRefusals())
	}
	return nil
}
