package fsm

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/rpc/pb"
)

// everyFieldSet returns an alloc with every field of its descriptor set to
// a value other than its default (nested messages empty but present), and
// an unknown field, as a newer version's row could carry.
func everyFieldSet(t *testing.T) *pb.Allocation {
	t.Helper()
	a := &pb.Allocation{}
	m := a.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			k := protoreflect.ValueOfString("k").MapKey()
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				mp.Set(k, protoreflect.ValueOfMessage(mp.NewValue().Message()))
			} else {
				mp.Set(k, protoreflect.ValueOfString("v"))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			l.Append(l.NewElement())
		case fd.Kind() == protoreflect.MessageKind:
			m.Mutable(fd)
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(string(fd.Name())))
		case fd.Kind() == protoreflect.EnumKind:
			m.Set(fd, protoreflect.ValueOfEnum(1))
		case fd.Kind() == protoreflect.Int32Kind:
			m.Set(fd, protoreflect.ValueOfInt32(int32(fd.Number())))
		case fd.Kind() == protoreflect.Int64Kind:
			m.Set(fd, protoreflect.ValueOfInt64(int64(fd.Number())))
		case fd.Kind() == protoreflect.Uint64Kind:
			m.Set(fd, protoreflect.ValueOfUint64(uint64(fd.Number())))
		case fd.Kind() == protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(true))
		default:
			t.Fatalf("field %s of kind %s: teach everyFieldSet to set it", fd.Name(), fd.Kind())
		}
		if !m.Has(fd) {
			t.Fatalf("field %s not set", fd.Name())
		}
	}
	m.SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7))
	return a
}

// A client update's row is a shallow copy of the stored one: every field
// of pb.Allocation, and the unknown fields of a newer version, must be in
// it. This fails when a field is added to the message and not to
// shallowCopy.
func TestShallowCopyKeepsEveryField(t *testing.T) {
	a := everyFieldSet(t)
	c := shallowCopy(a)
	if !proto.Equal(a, c) {
		t.Fatalf("shallow copy differs:\n got %v\nwant %v", c, a)
	}
	if string(c.ProtoReflect().GetUnknown()) != string(a.ProtoReflect().GetUnknown()) {
		t.Fatalf("unknown fields not kept: %x, want %x", c.ProtoReflect().GetUnknown(), a.ProtoReflect().GetUnknown())
	}
	if c == a {
		t.Fatal("shallow copy is the same message")
	}
}

// The row a client update writes changes what the update says and shares
// the rest: the stored row it replaced is left as it was, so a snapshot
// that holds it still reads the old status and task states.
func TestClientUpdatedLeavesTheStoredRowAlone(t *testing.T) {
	running := map[string]*pb.TaskState{"web": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING}}
	cur := &pb.Allocation{Id: "a1", NodeId: "n1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING,
		TaskStates: map[string]*pb.TaskState{"web": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING}},
		Resources:  &pb.AllocResources{CpuMhz: 100}, ModifyIndex: 5}
	before := proto.Clone(cur)
	a := clientUpdated(cur, &pb.AllocClientUpdate{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING,
		ClientDescription: "tasks running", TaskStates: running, UpdatedAt: 42}, 9)
	if !proto.Equal(cur, before) {
		t.Fatalf("stored row changed: %v, was %v", cur, before)
	}
	if a.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING || a.GetClientDescription() != "tasks running" ||
		a.GetModifiedAt() != 42 || a.GetModifyIndex() != 9 || !proto.Equal(a.GetTaskStates()["web"], running["web"]) {
		t.Fatalf("updated row %v", a)
	}
	if a.GetResources() != cur.GetResources() {
		t.Fatal("resources cloned, want shared with the stored row")
	}

	// No task states and no status: only the times move.
	b := clientUpdated(a, &pb.AllocClientUpdate{AllocId: "a1", UpdatedAt: 50}, 10)
	if b.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING || len(b.GetTaskStates()) != 1 || b.GetModifiedAt() != 50 {
		t.Fatalf("update without status or task states: %v", b)
	}
	// A terminal client status is final.
	done := clientUpdated(b, &pb.AllocClientUpdate{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}, 11)
	again := clientUpdated(done, &pb.AllocClientUpdate{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING}, 12)
	if again.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE {
		t.Fatalf("terminal status moved back to %s", again.GetClientStatus())
	}
}

// Under the tests' checkReplacePrev, replace panics when its prev is not
// the row the transaction holds: a row replaced since in the same
// transaction, a copy of it, or nil for a row that exists.
func TestReplaceChecksPrevIsTheHeldRow(t *testing.T) {
	if !checkReplacePrev {
		t.Fatal("checkReplacePrev is off in the package's tests")
	}
	st := newStateStore(productionSchema())
	tx := st.beginWrite()
	defer tx.abort()
	tx.index = 1
	first := &pb.Allocation{Id: "a1", NodeId: "n1", JobId: "web"}
	if err := allocsTable.replace(tx, nil, first); err != nil {
		t.Fatal(err)
	}
	second := shallowCopy(first)
	if err := allocsTable.replace(tx, first, second); err != nil {
		t.Fatal(err)
	}
	for name, prev := range map[string]*pb.Allocation{
		"replaced since": first, "a copy": shallowCopy(second), "nil for a stored row": nil,
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("replace with prev %s did not panic", name)
				}
			}()
			_ = allocsTable.replace(tx, prev, shallowCopy(second))
		}()
	}
}
