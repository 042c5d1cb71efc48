package fsm_test

import (
	"errors"
	"testing"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// batchEntry is one entry of a test batch and whether applying it alone
// fails.
type batchEntry struct {
	log  *raft.Log
	fail bool
}

// mixedBatch is a batch whose refused commands sit between accepted ones,
// every kind of refusal included, plus a configuration entry as raft passes
// to a batching FSM. Indexes start at 10.
func mixedBatch(t *testing.T) []batchEntry {
	entries := []struct {
		typ  raft.LogType
		data []byte
		fail bool
	}{
		{raft.LogCommand, mustEncode(t, fsm.NodeRegister, registerCmd("n1", "alpha", pb.NodeStatus_NODE_STATUS_READY)), false},
		{raft.LogCommand, mustEncode(t, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", RpcAddr: "127.0.0.1:4647"}}), false},
		// Refused by validation: no ID.
		{raft.LogCommand, mustEncode(t, fsm.NodeRegister, registerCmd("", "anon", pb.NodeStatus_NODE_STATUS_READY)), true},
		// Refused after a read: no such node.
		{raft.LogCommand, mustEncode(t, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "ghost", Status: pb.NodeStatus_NODE_STATUS_DOWN}), true},
		{raft.LogConfiguration, []byte{1, 2, 3}, false},
		// Must see n1, registered earlier in this very batch.
		{raft.LogCommand, mustEncode(t, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n1", Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: 9}), false},
		{raft.LogCommand, []byte{byte(fsm.NodeRegister), 0xff}, true}, // malformed
		{raft.LogCommand, []byte{0x7f, 1}, true},                      // unknown
		{raft.LogCommand, nil, true},                                  // empty
		{raft.LogCommand, []byte{0xc1, 1}, false},                     // unknown but ignorable: skipped
		{raft.LogCommand, mustEncode(t, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n1", Status: pb.NodeStatus_NODE_STATUS_UNSPECIFIED}), true},
		{raft.LogCommand, mustEncode(t, fsm.NodeRegister, registerCmd("n2", "beta", pb.NodeStatus_NODE_STATUS_READY)), false},
		{raft.LogCommand, mustEncode(t, fsm.ServerDelete, &pb.ServerDeleteCommand{Id: "s1"}), false},
		{raft.LogCommand, mustEncode(t, fsm.NodeDeregister, &pb.NodeDeregisterCommand{}), true},
		// Rows written earlier in the batch, as later commands must see
		// them: n1 re-registered keeps create index 10; n2 deregistered
		// and registered again gets a new one, and so does n0, which was
		// registered before the batch.
		{raft.LogCommand, mustEncode(t, fsm.NodeRegister, registerCmd("n1", "alpha2", pb.NodeStatus_NODE_STATUS_READY)), false},
		{raft.LogCommand, mustEncode(t, fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: "n2"}), false},
		{raft.LogCommand, mustEncode(t, fsm.NodeRegister, registerCmd("n2", "beta2", pb.NodeStatus_NODE_STATUS_READY)), false},
		{raft.LogCommand, mustEncode(t, fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: "n0"}), false},
		{raft.LogCommand, mustEncode(t, fsm.NodeRegister, registerCmd("n0", "zero2", pb.NodeStatus_NODE_STATUS_READY)), false},
	}
	out := make([]batchEntry, len(entries))
	for i, e := range entries {
		out[i] = batchEntry{log: &raft.Log{Index: uint64(i + 10), Term: 1, Type: e.typ, Data: e.data}, fail: e.fail}
	}
	return out
}

// seeded returns an FSM holding a node and a server the batch does not
// name, so a batch that wrongly rewrote the whole state would show.
func seeded(t *testing.T) *fsm.FSM {
	f := fsm.New(testLogger(t))
	applyOK(t, f, 1, fsm.NodeRegister, registerCmd("n0", "zero", pb.NodeStatus_NODE_STATUS_READY))
	applyOK(t, f, 2, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s0"}})
	return f
}

func logsOf(entries []batchEntry) []*raft.Log {
	logs := make([]*raft.Log, len(entries))
	for i, e := range entries {
		logs[i] = e.log
	}
	return logs
}

func mustDump(t *testing.T, st *fsm.StateStore) string {
	t.Helper()
	s, err := dumpState(st)
	if err != nil {
		t.Fatalf("dumping state: %v", err)
	}
	return s
}

// TestApplyBatchMatchesOneByOne applies a batch with refused commands in
// the middle and checks it ends in exactly the state, and answers exactly
// what, applying the entries one at a time (as raft does for a plain FSM)
// gives; and that the state is also the one reached by the accepted
// commands alone, so a refused command left no trace.
func TestApplyBatchMatchesOneByOne(t *testing.T) {
	entries := mixedBatch(t)

	batched := seeded(t)
	got := batched.ApplyBatch(logsOf(entries))
	if len(got) != len(entries) {
		t.Fatalf("ApplyBatch returned %d responses for %d entries", len(got), len(entries))
	}

	single := seeded(t)
	accepted := seeded(t)
	for i, e := range entries {
		var want any
		if e.log.Type == raft.LogCommand {
			want = single.Apply(e.log)
		}
		if e.log.Type == raft.LogCommand && !e.fail {
			if res := applyAt(accepted, e.log.Index, e.log.Data); res.Err != nil {
				t.Fatalf("entry %d applied to the accepted-only FSM: %v", i, res.Err)
			}
		}
		if want == nil {
			if got[i] != nil {
				t.Errorf("entry %d (%s): response %#v, want nil as raft gives a plain FSM", i, e.log.Type, got[i])
			}
			continue
		}
		w, g := want.(*fsm.ApplyResult), got[i].(*fsm.ApplyResult)
		if g.Index != w.Index || g.Type != w.Type || (g.Err == nil) != (w.Err == nil) ||
			(g.Err != nil && g.Err.Error() != w.Err.Error()) {
			t.Errorf("entry %d: batch answered %+v, one by one %+v", i, *g, *w)
		}
		if (w.Err != nil) != e.fail {
			t.Errorf("entry %d: applied alone, error %v; the test expects failure=%t", i, w.Err, e.fail)
		}
	}
	for _, sentinel := range []error{fsm.ErrInvalidCommand, fsm.ErrNodeNotFound, fsm.ErrMalformedCommand, fsm.ErrUnknownCommand, fsm.ErrEmptyCommand} {
		found := false
		for _, r := range got {
			if res, ok := r.(*fsm.ApplyResult); ok && errors.Is(res.Err, sentinel) {
				found = true
			}
		}
		if !found {
			t.Errorf("no batch result wraps %v; the batch should exercise every refusal", sentinel)
		}
	}

	want := mustDump(t, single.State())
	if gotState := mustDump(t, batched.State()); gotState != want {
		t.Errorf("state after ApplyBatch:\n%s\nstate after one-by-one Apply:\n%s", gotState, want)
	}
	if acc := mustDump(t, accepted.State()); acc != want {
		t.Errorf("state after the accepted commands alone:\n%s\nstate after all of them one by one:\n%s", acc, want)
	}
	// The last entries touching each table fix its index: nodes at 28 (n0
	// registered again), servers at 22 (the delete of s1).
	if nodes, _ := batched.State().Index(fsm.TableNodes); nodes != 28 {
		t.Errorf("nodes index after the batch = %d, want 28", nodes)
	}
	for id, create := range map[string]uint64{"n1": 10, "n2": 26, "n0": 28} {
		n, err := batched.State().NodeByID(nil, id)
		if err != nil || n == nil || n.GetCreateIndex() != create {
			t.Errorf("node %s after the batch: %v (%v), want create index %d", id, n, err, create)
		}
	}
	if servers, _ := batched.State().Index(fsm.TableServers); servers != 22 {
		t.Errorf("servers index after the batch = %d, want 22", servers)
	}
}

// TestApplyBatchEveryPrefix applies every prefix of the mixed batch as one
// batch, so a refused command at each position, and at the end of a batch,
// is covered.
func TestApplyBatchEveryPrefix(t *testing.T) {
	entries := mixedBatch(t)
	for n := 1; n <= len(entries); n++ {
		batched, single := seeded(t), seeded(t)
		batched.ApplyBatch(logsOf(entries[:n]))
		for _, e := range entries[:n] {
			if e.log.Type == raft.LogCommand {
				single.Apply(e.log)
			}
		}
		if got, want := mustDump(t, batched.State()), mustDump(t, single.State()); got != want {
			t.Errorf("first %d entries: batch state\n%s\none-by-one state\n%s", n, got, want)
		}
	}
}

// TestApplyBatchRefusedOnlyWritesNothing checks a batch of refused commands
// leaves the store as it was: no table index moves and no watcher wakes.
func TestApplyBatchRefusedOnlyWritesNothing(t *testing.T) {
	f := seeded(t)
	before := mustDump(t, f.State())
	ws := memdb.NewWatchSet()
	if _, err := f.State().Nodes(ws); err != nil {
		t.Fatal(err)
	}
	if _, err := f.State().Servers(ws); err != nil {
		t.Fatal(err)
	}
	var refused []*raft.Log
	for _, e := range mixedBatch(t) {
		if e.fail {
			refused = append(refused, e.log)
		}
	}
	for i, r := range f.ApplyBatch(refused) {
		if res := r.(*fsm.ApplyResult); res.Err == nil {
			t.Errorf("refused entry %d at index %d succeeded in a batch", i, res.Index)
		}
	}
	if after := mustDump(t, f.State()); after != before {
		t.Errorf("a batch of refused commands changed the state:\n%s\nwas\n%s", after, before)
	}
	if fired(ws) {
		t.Error("a batch of refused commands woke a watcher")
	}
}

// TestApplyBatchWakesOnlyChangedTables checks a batch of node commands
// fires watches on nodes and leaves a watch on servers asleep.
func TestApplyBatchWakesOnlyChangedTables(t *testing.T) {
	f := seeded(t)
	nodesWS, serversWS := memdb.NewWatchSet(), memdb.NewWatchSet()
	if _, err := f.State().Nodes(nodesWS); err != nil {
		t.Fatal(err)
	}
	if _, err := f.State().Servers(serversWS); err != nil {
		t.Fatal(err)
	}
	logs := []*raft.Log{
		{Index: 3, Type: raft.LogCommand, Data: mustEncode(t, fsm.NodeRegister, registerCmd("n1", "a", pb.NodeStatus_NODE_STATUS_READY))},
		{Index: 4, Type: raft.LogCommand, Data: mustEncode(t, fsm.NodeRegister, registerCmd("n2", "b", pb.NodeStatus_NODE_STATUS_READY))},
	}
	for _, r := range f.ApplyBatch(logs) {
		if res := r.(*fsm.ApplyResult); res.Err != nil {
			t.Fatalf("index %d: %v", res.Index, res.Err)
		}
	}
	if !fired(nodesWS) {
		t.Error("a batch registering nodes did not wake a watch on the nodes table")
	}
	if fired(serversWS) {
		t.Error("a batch registering nodes woke a watch on the servers table")
	}
	if idx, _ := f.State().Index(fsm.TableServers); idx != 2 {
		t.Errorf("servers index = %d after a node-only batch, want 2", idx)
	}
}

// fired reports whether any channel in ws has been closed, without waiting.
func fired(ws memdb.WatchSet) bool {
	for ch := range ws {
		select {
		case <-ch:
			return true
		default:
		}
	}
	return false
}
