package rules

import "berth.dev/berth/rpc/pb"

// The state machine's plan re-check is the last word on these; the
// scheduler proposes by them and the clients run and stop allocs by them.

// AllocServerTerminal reports whether the servers want the alloc gone
// (stop or evict).
func AllocServerTerminal(a *pb.Allocation) bool {
	switch a.GetDesiredStatus() {
	case pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP, pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_EVICT:
		return true
	}
	return false
}

// AllocClientTerminal reports whether the alloc has stopped running for
// good: complete, failed or lost.
func AllocClientTerminal(a *pb.Allocation) bool {
	return ClientStatusTerminal(a.GetClientStatus())
}

// ClientStatusTerminal reports whether s is a client status of an alloc
// that stopped running for good: complete, failed or lost.
func ClientStatusTerminal(s pb.AllocClientStatus) bool {
	switch s {
	case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE,
		pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED,
		pb.AllocClientStatus_ALLOC_CLIENT_STATUS_LOST:
		return true
	}
	return false
}

// AllocTerminal reports whether the alloc no longer holds its node's
// resources from the scheduler's point of view: the servers stopped it or
// it ended on its own. A stopped alloc may still be shutting down on its
// client; its resources are counted free as soon as the stop is decided,
// as Nomad does, so a replacement is never held back by a slow kill.
func AllocTerminal(a *pb.Allocation) bool {
	return AllocServerTerminal(a) || AllocClientTerminal(a)
}

// NodeSchedulable reports whether new allocs may be placed on the node:
// ready, eligible, not draining and not fenced.
func NodeSchedulable(n *pb.Node) bool {
	return n.GetStatus() == pb.NodeStatus_NODE_STATUS_READY &&
		n.GetEligibility() != pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE &&
		n.GetDrain() == nil && !n.GetFenced()
}

// NodeCapacity is what the scheduler may hand out on a node.
func NodeCapacity(n *pb.Node) (cpuMHz, memoryMB int64) {
	r := n.GetResources()
	return r.GetCpuMhz() - r.GetReservedCpuMhz(), r.GetMemoryMb() - r.GetReservedMemoryMb()
}

// Dimension names for exhausted resources, as AllocMetric counts them.
const (
	DimensionCPU    = "cpu"
	DimensionMemory = "memory"
)

// AllocsFit reports whether the non-terminal allocs in allocs fit on the
// node together, and if not, which resource ran out first. Terminal allocs
// are skipped, so callers pass a node's current allocs plus the proposed
// ones without filtering.
func AllocsFit(n *pb.Node, allocs []*pb.Allocation) (ok bool, dimension string, usedCPU, usedMem int64) {
	var u Usage
	for _, a := range allocs {
		u.Add(a)
	}
	return u.Fits(n)
}

// Usage sums what allocs use, for AllocsFit and for the state machine's
// PlanApply, which starts from the node's row in node_usage.
type Usage struct{ CPU, Mem int64 }

// Add counts a unless it is terminal.
func (u *Usage) Add(a *pb.Allocation) {
	if AllocTerminal(a) {
		return
	}
	u.CPU += a.GetResources().GetCpuMhz()
	u.Mem += a.GetResources().GetMemoryMb()
}

// Remove counts a out unless it is terminal: a was counted in.
func (u *Usage) Remove(a *pb.Allocation) {
	if AllocTerminal(a) {
		return
	}
	u.CPU -= a.GetResources().GetCpuMhz()
	u.Mem -= a.GetResources().GetMemoryMb()
}

// Fits is AllocsFit's answer for what u counted.
func (u Usage) Fits(n *pb.Node) (ok bool, dimension string, usedCPU, usedMem int64) {
	cpu, mem := NodeCapacity(n)
	switch {
	case u.CPU > cpu:
		return false, DimensionCPU, u.CPU, u.Mem
	case u.Mem > mem:
		return false, DimensionMemory, u.CPU, u.Mem
	}
	return true, "", u.CPU, u.Mem
}
