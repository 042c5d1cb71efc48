package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// splitNoise matches what only the split form adds to a script's output:
// the rows of csi_plugin_instances and csi_plugin_allocs and their index
// records in a snapshot's description line, with its end record's
// position, which those records move; and those tables' indexes in a
// state dump's index line.
var (
	splitNoise       = regexp.MustCompile(`\s*(index:)?csi_plugin_(instances|allocs)[:=]\S+|\s*end:\d+`)
	splitNoiseInDump = regexp.MustCompile(`\s*csi_plugin_(instances|allocs)=\d+`)
	snapshotLine     = regexp.MustCompile(`(?m)^snapshot \S+: .*$`)
)

// withoutSplitNoise returns out without splitNoise.
func withoutSplitNoise(out string) string {
	out = snapshotLine.ReplaceAllStringFunc(out, func(line string) string { return splitNoise.ReplaceAllString(line, "") })
	return splitNoiseInDump.ReplaceAllString(out, "")
}

// sameAsInline is the split tests' check of a script step: it reports a
// difference from the expected (inline) output as an error, with both,
// and always answers td.Expected, so -rewrite (which also runs these
// tests) neither writes the split output into testdata nor hides the
// difference.
func sameAsInline(t *testing.T, td *datadriven.TestData, out string) string {
	t.Helper()
	if got, want := withoutSplitNoise(out), withoutSplitNoise(td.Expected); got != want {
		t.Errorf("%s: split form differs from the expected (inline) output:\n--- split\n%s--- inline\n%s", td.Pos, got, want)
	}
	return td.Expected
}

// TestScriptsSplitPlugins runs every script of testdata with the
// pluginInstancesSince gate forced on, so the plugin rows keep their
// instances in csi_plugin_instances, and holds it to the same expected
// output (up to splitNoise, sameAsInline): every behaviour the scripts pin for the
// plugin table (counts, provider, controller_required, plugin switches,
// the volumes' mirrors, skipped publishes, modify indexes) is the same
// in both forms. Not parallel: the gate is forced for the package.
func TestScriptsSplitPlugins(t *testing.T) {
	defer fsm.ForceInstancesSplit(true)()
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newScriptHarness(t)
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			return sameAsInline(t, td, h.run(t, td))
		})
	})
}

// TestScriptsSplitPluginsWritesInstances checks that the forced gate
// does split: a plugin script leaves its rows in csi_plugin_instances.
func TestScriptsSplitPluginsWritesInstances(t *testing.T) {
	defer fsm.ForceInstancesSplit(true)()
	h := newScriptHarness(t)
	datadriven.RunTest(t, "testdata/plugin_switch.txt", func(t *testing.T, td *datadriven.TestData) string {
		return sameAsInline(t, td, h.run(t, td))
	})
	p, insts, err := h.fsm.State().CSIPluginRaw("hostpath")
	if err != nil {
		t.Fatal(err)
	}
	if p == nil || len(p.GetControllers())+len(p.GetNodes()) != 0 || len(insts) == 0 {
		t.Fatalf("plugin row %v with %d instance rows: want a split row and its instances", p, len(insts))
	}
	if !strings.Contains(describeState(t, h), "csi_plugin_instances=") {
		t.Fatalf("state index has no csi_plugin_instances")
	}
}

func describeState(t *testing.T, h *scriptHarness) string {
	s, err := dumpState(h.fsm.State())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pluginCmd is a NodeCSIUpdate for node with a controller and a node
// instance of plugin p (only a node instance when ctl is false).
func pluginCmd(node, p string, ctl, healthy bool, at int64) *pb.NodeCSIUpdateCommand {
	info := func(typ pb.CSIPluginType) *pb.CSIPluginInfo {
		return &pb.CSIPluginInfo{PluginId: p, Type: typ, Healthy: healthy, Provider: "prov-" + node, ProviderVersion: "1",
			ControllerRequired: ctl, UpdatedAt: at}
	}
	cmd := &pb.NodeCSIUpdateCommand{NodeId: node, UpdatedAt: at, DeriveFromServing: true,
		Nodes: map[string]*pb.CSIPluginInfo{p: info(pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE)}}
	if ctl {
		cmd.Controllers = map[string]*pb.CSIPluginInfo{p: info(pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER)}
	}
	return cmd
}

// TestPluginInstancesGateFollowsServers applies one history to two FSMs
// whose servers table differs only in a server's version: the one below
// pluginInstancesSince keeps the instances in the plugin row (as an older
// server writes it), the other splits them; every read of the plugin is
// the same. Upgrading the old one splits its row at the next event, and a
// server recorded older again joins the split row back. Both FSMs run
// this code: the join serves a server of this code reading an older
// servers table (a restored operator snapshot), not an older binary,
// which never had the rows and which the leader refuses to add once the
// gate holds (host/server TestJoinBelowApplyGateRefused).
func TestPluginInstancesGateFollowsServers(t *testing.T) {
	old, cur := fsm.New(nil), fsm.New(nil)
	index := uint64(0)
	both := func(typ fsm.MessageType, msg proto.Message) {
		t.Helper()
		index++
		applyOK(t, old, index, typ, msg)
		applyOK(t, cur, index, typ, msg)
	}
	server := func(f *fsm.FSM, version string) {
		t.Helper()
		index++
		applyOK(t, f, index, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: version}})
	}
	server(old, "0.1.0-dev.3")
	server(cur, fsm.PluginInstancesSinceVersion)
	wantForm := func(f *fsm.FSM, split bool, instances int) {
		t.Helper()
		p, insts, err := f.State().CSIPluginRaw("p")
		if err != nil {
			t.Fatal(err)
		}
		inRow := len(p.GetControllers()) + len(p.GetNodes())
		if (inRow == 0) != split || len(insts) != instances {
			t.Fatalf("plugin row with %d instances and %d instance rows, want split=%t with %d", inRow, len(insts), split, instances)
		}
	}
	same := func(step string) {
		t.Helper()
		a, err := old.State().CSIPluginByID(nil, "p")
		if err != nil {
			t.Fatal(err)
		}
		b, err := cur.State().CSIPluginByID(nil, "p")
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(a, b) {
			t.Fatalf("%s: plugin read differs:\ninline %v\nsplit  %v", step, a, b)
		}
	}
	for i := range 4 {
		both(fsm.NodeRegister, registerCmd(fmt.Sprintf("n%d", i), "", pb.NodeStatus_NODE_STATUS_READY))
	}
	both(fsm.NodeCSIUpdate, pluginCmd("n2", "p", false, true, 1))
	same("first node instance")
	both(fsm.NodeCSIUpdate, pluginCmd("n1", "p", true, false, 2))
	same("an unhealthy controller")
	both(fsm.NodeCSIUpdate, pluginCmd("n3", "p", true, true, 3))
	same("a healthy controller after it")
	both(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n3", Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: 4})
	same("its node down")
	both(fsm.NodeCSIUpdate, pluginCmd("n1", "p", false, true, 5))
	same("the first controller gone")
	wantForm(old, false, 0)
	wantForm(cur, true, 4)

	server(old, fsm.PluginInstancesSinceVersion)
	both(fsm.NodeCSIUpdate, pluginCmd("n0", "p", false, true, 6))
	same("upgraded: split at the next event")
	wantForm(old, true, 5)

	server(old, "0.1.0-dev.3")
	server(cur, "0.1.0-dev.3")
	both(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n3", Status: pb.NodeStatus_NODE_STATUS_READY, UpdatedAt: 7})
	same("an older server recorded again: joined")
	wantForm(old, false, 0)
	wantForm(cur, false, 0)

	server(cur, fsm.PluginInstancesSinceVersion)
	for _, n := range []string{"n0", "n1", "n2", "n3"} {
		both(fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: n})
	}
	if p, insts, err := cur.State().CSIPluginRaw("p"); err != nil || p != nil || len(insts) != 0 {
		t.Fatalf("every node gone: plugin %v, %d instance rows (%v), want none", p, len(insts), err)
	}
}

// TestPluginInstancesRestoredInlineRow restores a snapshot of servers
// below the gate (the plugin row holding its instances) into a server
// that is at it: the row is read as it is, split at its next event, and
// every read matches a server that kept applying inline.
func TestPluginInstancesRestoredInlineRow(t *testing.T) {
	old := fsm.New(nil)
	index := uint64(1)
	applyOK(t, old, index, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: "0.1.0-dev.3"}})
	for i := range 3 {
		index++
		applyOK(t, old, index, fsm.NodeRegister, registerCmd(fmt.Sprintf("n%d", i), "", pb.NodeStatus_NODE_STATUS_READY))
		index++
		applyOK(t, old, index, fsm.NodeCSIUpdate, pluginCmd(fmt.Sprintf("n%d", i), "p", i == 1, true, int64(i)))
	}
	restored := fsm.New(nil)
	if err := restoreBytes(restored, snapshotBytes(t, old)); err != nil {
		t.Fatal(err)
	}
	read := func(f *fsm.FSM) *pb.CSIPlugin {
		t.Helper()
		p, err := f.State().CSIPluginByID(nil, "p")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if a, b := read(old), read(restored); !proto.Equal(a, b) {
		t.Fatalf("restored inline row reads %v, want %v", b, a)
	}
	index++
	applyOK(t, restored, index, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: fsm.PluginInstancesSinceVersion}})
	applyOK(t, old, index, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: "0.1.0-dev.3"}})
	index++
	cmd := pluginCmd("n2", "p", false, false, 9)
	applyOK(t, restored, index, fsm.NodeCSIUpdate, cmd)
	applyOK(t, old, index, fsm.NodeCSIUpdate, cmd)
	if a, b := read(old), read(restored); !proto.Equal(a, b) {
		t.Fatalf("after an event: split row reads %v, want %v", b, a)
	}
	p, insts, err := restored.State().CSIPluginRaw("p")
	if err != nil || len(p.GetControllers())+len(p.GetNodes()) != 0 || len(insts) != 4 {
		t.Fatalf("restored row after an event: %v with %d instance rows (%v), want it split into 4", p, len(insts), err)
	}
}

// TestRestoreRefusesCorruptPluginRows: RestoreStrict (an operator's
// snapshot) refuses, with ErrSnapshotCorrupt, a snapshot whose plugin rows break what the applies
// keep (an instance row without its plugin row, an inline row with
// instance rows beside it, a split row whose counts its instances do not
// make), where before it accepted them and the split counts drifted; what
// the applies wrote it accepts. Restore (raft's) rebuilds those rows from
// their instances and allocations, logging at Error, rather than keep the
// server from starting.
func TestRestoreRefusesCorruptPluginRows(t *testing.T) {
	build := func(t *testing.T, version string) (*fsm.FSM, uint64) {
		t.Helper()
		f := fsm.New(nil)
		applyOK(t, f, 1, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: version}})
		applyOK(t, f, 2, fsm.NodeRegister, registerCmd("n1", "", pb.NodeStatus_NODE_STATUS_READY))
		applyOK(t, f, 3, fsm.NodeRegister, registerCmd("n2", "", pb.NodeStatus_NODE_STATUS_READY))
		applyOK(t, f, 4, fsm.NodeCSIUpdate, pluginCmd("n2", "p", true, true, 1))
		return f, 5
	}
	healthy := &pb.CSIPluginInfo{PluginId: "p", Healthy: true, Provider: "x"}
	for _, tt := range []struct {
		name, version string
		put           *pb.CSIPluginInstance
		want          string
	}{
		{"orphan instance", fsm.PluginInstancesSinceVersion, &pb.CSIPluginInstance{PluginId: "ghost", NodeId: "n1", Info: healthy}, "has no csi_plugins row"},
		{"inline row with instance rows", "0.1.0-dev.3", &pb.CSIPluginInstance{PluginId: "p", NodeId: "n1", Info: healthy}, "has rows of csi_plugin_instances"},
		{"split counts off", fsm.PluginInstancesSinceVersion, &pb.CSIPluginInstance{PluginId: "p", NodeId: "n1", Info: healthy}, "counts"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, index := build(t, tt.version)
			if err := restoreBytes(fsm.New(nil), snapshotBytes(t, f)); err != nil {
				t.Fatalf("the applies' rows: %v", err)
			}
			if err := f.State().PutCSIPluginInstanceUnchecked(index, tt.put); err != nil {
				t.Fatal(err)
			}
			if err := f.State().CheckPluginRows(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CheckPluginRows = %v, want it to say %q", err, tt.want)
			}
			snap := snapshotBytes(t, f)
			err := fsm.New(nil).RestoreStrict(io.NopCloser(bytes.NewReader(snap)))
			if !errors.Is(err, fsm.ErrSnapshotCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("RestoreStrict = %v, want ErrSnapshotCorrupt saying %q", err, tt.want)
			}
			// Raft's own restore (start-up, InstallSnapshot) rebuilds the
			// rows and says so at Error, the same on every server.
			var logs strings.Builder
			g := fsm.New(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Error}))
			if err := restoreBytes(g, snap); err != nil {
				t.Fatalf("Restore = %v, want the rows rebuilt", err)
			}
			if err := g.State().CheckPluginRows(); err != nil {
				t.Errorf("rows after the rebuild: %v", err)
			}
			if !strings.Contains(logs.String(), "[ERROR]") || !strings.Contains(logs.String(), tt.want) {
				t.Errorf("log = %q, want an Error saying %q", logs.String(), tt.want)
			}
			again := fsm.New(nil)
			if err := restoreBytes(again, snap); err != nil {
				t.Fatal(err)
			}
			if a, b := snapshotBytes(t, g), snapshotBytes(t, again); !bytes.Equal(a, b) {
				t.Errorf("two restores of one snapshot rebuilt different rows")
			}
			if err := g.RestoreStrict(io.NopCloser(bytes.NewReader(snapshotBytes(t, g)))); err != nil {
				t.Errorf("the rebuilt rows' snapshot: %v", err)
			}
		})
	}
}

// TestPluginInstancesFormChangeQuiet: an apply that only moves a plugin's
// row to the other form (the gate turned on, then off) writes it with its
// modify index and leaves csi_plugins' index alone, so readers waiting on
// either do not wake for it; the reads are the same.
func TestPluginInstancesFormChangeQuiet(t *testing.T) {
	f := fsm.New(nil)
	index := uint64(1)
	apply := func(typ fsm.MessageType, msg proto.Message) {
		t.Helper()
		index++
		applyOK(t, f, index, typ, msg)
	}
	apply(fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: "0.1.0-dev.3"}})
	for _, n := range []string{"n1", "n2"} {
		apply(fsm.NodeRegister, registerCmd(n, "", pb.NodeStatus_NODE_STATUS_READY))
		apply(fsm.NodeCSIUpdate, pluginCmd(n, "p", n == "n1", true, 1))
	}
	read := func() (*pb.CSIPlugin, uint64) {
		t.Helper()
		p, err := f.State().CSIPluginByID(nil, "p")
		if err != nil {
			t.Fatal(err)
		}
		idx, err := f.State().Index(fsm.TableCSIPlugins)
		if err != nil {
			t.Fatal(err)
		}
		return p, idx
	}
	p0, idx0 := read()
	for _, step := range []struct {
		version string
		split   bool
	}{{fsm.PluginInstancesSinceVersion, true}, {"0.1.0-dev.3", false}} {
		apply(fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: step.version}})
		// The same plugin set again: the row is touched, nothing changes.
		apply(fsm.NodeCSIUpdate, pluginCmd("n2", "p", false, true, 1))
		raw, insts, err := f.State().CSIPluginRaw("p")
		if err != nil {
			t.Fatal(err)
		}
		if (len(raw.GetNodes()) == 0) != step.split || (len(insts) > 0) != step.split {
			t.Fatalf("at %s: row %v with %d instance rows, want split=%t", step.version, raw, len(insts), step.split)
		}
		p, idx := read()
		if !proto.Equal(p, p0) || idx != idx0 {
			t.Fatalf("at %s the form change showed: plugin %v at table index %d, was %v at %d", step.version, p, idx, p0, idx0)
		}
	}
}
