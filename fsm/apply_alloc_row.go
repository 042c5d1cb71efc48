package fsm

import (
	"fmt"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// replace stores m over prev, the row with its primary key as the
// transaction holds it (nil for none): insert, for a caller that has read
// prev already, without reading it again. A stale prev (a row this
// transaction has replaced since) would give the derived tables a wrong
// diff; with checkReplacePrev (the package's tests set it) replace reads
// the row again and panics unless it is prev itself.
func (t *table[M]) replace(tx *writeTxn, prev, m M) error {
	if checkReplacePrev {
		t.mustHold(tx, prev, m)
	}
	return t.write(tx, m, prev, true)
}

// checkReplacePrev makes replace check its prev (tests only: the check
// reads the row again, what replace is there to spare).
var checkReplacePrev bool

// mustHold panics unless prev is the row, the same pointer, that tx holds
// under m's primary key (nil for none).
func (t *table[M]) mustHold(tx *writeTxn, prev, m M) {
	parts := t.keyParts(m)
	obj, err := tx.firstByEncodedKey(t.name, encodeKey(parts), parts)
	if err != nil {
		panic(fmt.Sprintf("replace %s row %s: reading it: %v", t.name, t.keyString(m), err))
	}
	var held M
	if obj != nil {
		if held, err = t.row(obj); err != nil {
			panic(fmt.Sprintf("replace %s row %s: %v", t.name, t.keyString(m), err))
		}
	}
	if any(held) != any(prev) {
		panic(fmt.Sprintf("replace %s row %s: prev is not the row the transaction holds", t.name, t.keyString(m)))
	}
}

// clientUpdated is the row of alloc cur after the client update u at raft
// index: its client status and description (unless cur's client status is
// terminal already; unspecified changes neither), its task states when u
// reports any, its modified_at and modify index.
//
// The new row shares every field it does not change with cur (shallowCopy).
// Stored rows are never mutated, only replaced, so sharing is safe; a deep
// copy here cloned the task states the update was about to replace, and
// was the largest cost of a client update's apply after memdb's own
// writes (BenchmarkApplyAllocClientUpdates).
func clientUpdated(cur *pb.Allocation, u *pb.AllocClientUpdate, index uint64) *pb.Allocation {
	a := shallowCopy(cur)
	if cs := u.GetClientStatus(); cs != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_UNSPECIFIED && !rules.AllocClientTerminal(cur) {
		a.ClientStatus = cs
		a.ClientDescription = u.GetClientDescription()
	}
	if len(u.GetTaskStates()) > 0 {
		a.TaskStates = u.GetTaskStates()
	}
	a.ModifiedAt = u.GetUpdatedAt()
	a.ModifyIndex = index
	return a
}

// shallowCopy returns a new alloc holding m's values: scalars copied;
// messages, maps, lists and unknown fields (a newer version's) shared with
// m, not cloned. TestShallowCopyKeepsEveryField fails when a field added to
// pb.Allocation is not copied here. (protoreflect's Range and Set would
// copy whatever the message holds, but box every string they pass: 10%
// of a client update's allocations.)
func shallowCopy(m *pb.Allocation) *pb.Allocation {
	a := &pb.Allocation{
		Id: m.Id, Name: m.Name, Index: m.Index, EvalId: m.EvalId, NodeId: m.NodeId, NodeName: m.NodeName,
		JobId: m.JobId, JobVersion: m.JobVersion, TaskGroup: m.TaskGroup, Resources: m.Resources,
		DesiredStatus: m.DesiredStatus, DesiredDescription: m.DesiredDescription, DesiredTransition: m.DesiredTransition,
		ClientStatus: m.ClientStatus, ClientDescription: m.ClientDescription, TaskStates: m.TaskStates,
		PreviousAllocation: m.PreviousAllocation, NextAllocation: m.NextAllocation, RescheduleEvents: m.RescheduleEvents,
		FollowupEvalId: m.FollowupEvalId, CreatedAt: m.CreatedAt, ModifiedAt: m.ModifiedAt,
		CreateIndex: m.CreateIndex, ModifyIndex: m.ModifyIndex, AllocModifyIndex: m.AllocModifyIndex,
		HostVolumeIds: m.HostVolumeIds,
	}
	if unknown := m.ProtoReflect().GetUnknown(); len(unknown) > 0 {
		a.ProtoReflect().SetUnknown(unknown)
	}
	return a
}
