package scheduler

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// Task resource defaults, as job.proto documents them, for a task whose
// resources block leaves a field at 0.
const (
	DefaultTaskCPUMHz   = 100
	DefaultTaskMemoryMB = 300
)

// groupResources sums the group's task resources, with defaults filled in.
func groupResources(tg *pb.TaskGroup) *pb.AllocResources {
	r := &pb.AllocResources{Tasks: map[string]*pb.TaskResources{}}
	for _, t := range tg.GetTasks() {
		cpu, mem := t.GetResources().GetCpuMhz(), t.GetResources().GetMemoryMb()
		if cpu <= 0 {
			cpu = DefaultTaskCPUMHz
		}
		if mem <= 0 {
			mem = DefaultTaskMemoryMB
		}
		r.Tasks[t.GetName()] = &pb.TaskResources{CpuMhz: cpu, MemoryMb: mem}
		r.CpuMhz += cpu
		r.MemoryMb += mem
	}
	return r
}

// AllocName is an alloc's name: "<job>.<group>[<index>]".
func AllocName(job, group string, index int32) string {
	return fmt.Sprintf("%s.%s[%d]", job, group, index)
}

// newAlloc builds the row of a placement of tg on n.
func (s *sched) newAlloc(tg *pb.TaskGroup, index int32, n *pb.Node, prev *pb.Allocation) *pb.Allocation {
	a := &pb.Allocation{
		Id:            s.opts.NewID(),
		Name:          AllocName(s.job.GetId(), tg.GetName(), index),
		Index:         index,
		EvalId:        s.eval.GetId(),
		NodeId:        n.GetId(),
		NodeName:      n.GetName(),
		JobId:         s.job.GetId(),
		JobVersion:    s.job.GetVersion(),
		TaskGroup:     tg.GetName(),
		Resources:     groupResources(tg),
		DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN,
		ClientStatus:  pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING,
		CreatedAt:     s.opts.Now,
		ModifiedAt:    s.opts.Now,
	}
	if prev != nil {
		a.PreviousAllocation = prev.GetId()
	}
	return a
}

// inPlace returns the existing alloc moved to the current job version, for
// an update that needs no restart.
func (s *sched) inPlace(a *pb.Allocation) *pb.Allocation {
	u := proto.Clone(a).(*pb.Allocation)
	u.JobVersion = s.job.GetVersion()
	u.EvalId = s.eval.GetId()
	u.ModifiedAt = s.opts.Now
	return u
}

// sortAllocs orders allocs by index, then creation, then ID, so every
// decision that picks among allocs is deterministic.
func sortAllocs(as []*pb.Allocation) {
	sort.SliceStable(as, func(i, j int) bool {
		a, b := as[i], as[j]
		if a.GetIndex() != b.GetIndex() {
			return a.GetIndex() < b.GetIndex()
		}
		if a.GetCreateIndex() != b.GetCreateIndex() {
			return a.GetCreateIndex() < b.GetCreateIndex()
		}
		if a.GetCreatedAt() != b.GetCreatedAt() {
			return a.GetCreatedAt() < b.GetCreatedAt()
		}
		return a.GetId() < b.GetId()
	})
}
