package fsm_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// TestStartUpRestoresOwnSnapshotWithDriftedPluginRows: a server whose
// own latest snapshot holds a split plugin row whose counts its instances
// do not make (an apply's drift) still starts: raft.NewRaft restores it
// from its file snapshot store, the row is rebuilt and an Error says so.
// Before, Restore refused it, NewRaft failed, and no restarted server
// started.
func TestStartUpRestoresOwnSnapshotWithDriftedPluginRows(t *testing.T) {
	f := fsm.New(nil)
	applyOK(t, f, 1, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: fsm.PluginInstancesSinceVersion}})
	applyOK(t, f, 2, fsm.NodeRegister, registerCmd("n1", "", pb.NodeStatus_NODE_STATUS_READY))
	applyOK(t, f, 3, fsm.NodeRegister, registerCmd("n2", "", pb.NodeStatus_NODE_STATUS_READY))
	applyOK(t, f, 4, fsm.NodeCSIUpdate, pluginCmd("n2", "p", true, true, 1))
	if err := f.State().PutCSIPluginInstanceUnchecked(5, &pb.CSIPluginInstance{PluginId: "p", NodeId: "n1", Info: &pb.CSIPluginInfo{PluginId: "p", Healthy: true, Provider: "x"}}); err != nil {
		t.Fatal(err)
	}
	snap := snapshotBytes(t, f)

	dir := t.TempDir()
	store, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("")
	cfg := raft.Configuration{Servers: []raft.Server{{ID: "s1", Address: trans.LocalAddr()}}}
	sink, err := store.Create(raft.SnapshotVersionMax, 5, 1, cfg, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(snap); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	g := fsm.New(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Error}))
	rc := raft.DefaultConfig()
	rc.LocalID = "s1"
	rc.Logger = hclog.NewNullLogger()
	r, err := raft.NewRaft(rc, g, raft.NewInmemStore(), raft.NewInmemStore(), store, trans)
	if err != nil {
		t.Fatalf("NewRaft on the server's own snapshot: %v", err)
	}
	defer func() { _ = r.Shutdown().Error() }()
	if err := g.State().CheckPluginRows(); err != nil {
		t.Errorf("rows after start-up: %v", err)
	}
	if !strings.Contains(logs.String(), "[ERROR]") || !strings.Contains(logs.String(), `csi_plugins row \"p\"`) {
		t.Errorf("log %q: want an Error naming plugin p", logs.String())
	}
}
