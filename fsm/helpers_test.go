package fsm_test

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// testLogger routes FSM logs to t.Log, so they show only on failure.
func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   t.Name(),
		Level:  hclog.Debug,
		Output: testWriter{t},
	})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

var _ raft.SnapshotSink = (*memSink)(nil)

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

// snapshotBytes persists f's current state and returns the stream.
func snapshotBytes(t testing.TB, f *fsm.FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("Persist left sink closed=%v cancelled=%v, want closed only", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

func restoreBytes(f *fsm.FSM, b []byte) error {
	return f.Restore(io.NopCloser(bytes.NewReader(b)))
}

// mustEncode encodes a command or fails the test.
func mustEncode(t testing.TB, typ fsm.MessageType, msg proto.Message) []byte {
	t.Helper()
	buf, err := fsm.Encode(typ, msg)
	if err != nil {
		t.Fatalf("Encode(%s): %v", typ, err)
	}
	return buf
}

// applyAt applies data as a command entry at index.
func applyAt(f *fsm.FSM, index uint64, data []byte) *fsm.ApplyResult {
	return f.ApplyLog(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data})
}

// applyOK encodes and applies a command at index, failing the test if the
// command is refused.
func applyOK(t testing.TB, f *fsm.FSM, index uint64, typ fsm.MessageType, msg proto.Message) {
	t.Helper()
	if res := applyAt(f, index, mustEncode(t, typ, msg)); res.Err != nil {
		t.Fatalf("%s at %d: %v", typ, index, res.Err)
	}
}

func registerCmd(id, name string, status pb.NodeStatus) *pb.NodeRegisterCommand {
	return &pb.NodeRegisterCommand{Node: &pb.Node{Id: id, Name: name, Status: status}}
}

// stateReader is what both *fsm.StateStore and *fsm.StateSnapshot offer.
type stateReader interface {
	Nodes(ws memdb.WatchSet) ([]*pb.Node, error)
	Servers(ws memdb.WatchSet) ([]*pb.ServerMember, error)
	Index(table string) (uint64, error)
	LatestIndex() (uint64, error)
	JobsPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.Job) bool) ([]*pb.Job, string, error)
	JobVersions(ws memdb.WatchSet, id string) ([]*pb.Job, error)
	EvalsPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.Evaluation) bool) ([]*pb.Evaluation, string, error)
	AllocsPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.Allocation) bool) ([]*pb.Allocation, string, error)
	NodeAllocIndexRows() ([]*pb.TableIndex, error)
	CSIPluginsPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.CSIPlugin) bool) ([]*pb.CSIPlugin, string, error)
	CSIPluginByID(ws memdb.WatchSet, id string) (*pb.CSIPlugin, error)
	VolumesPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.Volume) bool) ([]*pb.Volume, string, error)
	ClaimsPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.Claim) bool) ([]*pb.Claim, string, error)
	AttachmentsPage() ([]*pb.Attachment, error)
	HostVolumesPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.HostVolume) bool) ([]*pb.HostVolume, string, error)
}

var (
	_ stateReader = (*fsm.StateStore)(nil)
	_ stateReader = (*fsm.StateSnapshot)(nil)
)

// dumpState prints the whole store compactly and deterministically: table
// indexes, then every row in key order.
func dumpState(st stateReader) (string, error) {
	var b strings.Builder
	nodesIdx, err := st.Index(fsm.TableNodes)
	if err != nil {
		return "", err
	}
	serversIdx, err := st.Index(fsm.TableServers)
	if err != nil {
		return "", err
	}
	latest, err := st.LatestIndex()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "index: nodes=%d servers=%d", nodesIdx, serversIdx)
	// The job tables' indexes only once written, so the scripts about
	// nodes and servers read as they did before those tables existed.
	for _, tbl := range []string{fsm.TableJobs, fsm.TableJobVersions, fsm.TableEvals, fsm.TableAllocs, fsm.TableNodeAllocIndex, fsm.TableCSIPlugins, fsm.TableCSIPluginInstances, fsm.TableCSIPluginAllocs,
		fsm.TableVolumes, fsm.TableClaims, fsm.TableAttachments, fsm.TableHostVolumes} {
		idx, err := st.Index(tbl)
		if err != nil {
			return "", err
		}
		if idx != 0 {
			fmt.Fprintf(&b, " %s=%d", tbl, idx)
		}
	}
	fmt.Fprintf(&b, " latest=%d\n", latest)
	nodes, err := st.Nodes(nil)
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		fmt.Fprintf(&b, "node %s: name=%s status=%s", n.GetId(), n.GetName(), pb.EnumWord(n.GetStatus()))
		if d := n.GetStatusDescription(); d != "" {
			fmt.Fprintf(&b, " desc=%q", d)
		}
		fmt.Fprintf(&b, " updated=%d registered=%d create=%d modify=%d",
			n.GetStatusUpdatedAt(), n.GetRegisteredAt(), n.GetCreateIndex(), n.GetModifyIndex())
		if a := n.GetHttpAddr(); a != "" {
			fmt.Fprintf(&b, " http=%s", a)
		}
		if len(n.GetDrivers()) > 0 {
			fmt.Fprintf(&b, " drivers=%s", strings.Join(sortedKeys(n.GetDrivers()), ","))
		}
		if e := n.GetEligibility(); e != pb.NodeEligibility_NODE_ELIGIBILITY_UNSPECIFIED {
			fmt.Fprintf(&b, " eligibility=%s", pb.EnumWord(e))
		}
		if d := n.GetDrain(); d != nil {
			fmt.Fprintf(&b, " drain=(deadline=%dms started=%d)", d.GetDeadlineMs(), d.GetStartedAt())
		}
		if r := n.GetResources(); r != nil {
			fmt.Fprintf(&b, " cpu=%d mem=%d", r.GetCpuMhz(), r.GetMemoryMb())
		}
		if c := n.GetCsiControllerPlugins(); len(c) > 0 {
			fmt.Fprintf(&b, " csi-controllers=%s", strings.Join(sortedKeys(c), ","))
		}
		if c := n.GetCsiNodePlugins(); len(c) > 0 {
			fmt.Fprintf(&b, " csi-nodes=%s", strings.Join(sortedKeys(c), ","))
		}
		if h := n.GetSecretHash(); len(h) > 0 {
			fmt.Fprintf(&b, " secret=%s", h)
		}
		if n.GetReadmitted() {
			b.WriteString(" readmitted")
		}
		b.WriteString("\n")
	}
	servers, err := st.Servers(nil)
	if err != nil {
		return "", err
	}
	for _, s := range servers {
		fmt.Fprintf(&b, "server %s: name=%s rpc=%s raft=%s http=%s version=%s create=%d modify=%d\n",
			s.GetId(), s.GetName(), s.GetRpcAddr(), s.GetRaftAddr(), s.GetHttpAddr(), s.GetVersion(),
			s.GetCreateIndex(), s.GetModifyIndex())
	}
	if err := dumpJobs(&b, st); err != nil {
		return "", err
	}
	return b.String(), nil
}

// dumpJobs prints jobs with their versions, evals, allocs and the nodes'
// alloc indexes.
func dumpJobs(b *strings.Builder, st stateReader) error {
	jobs, _, err := st.JobsPage(nil, "", 0, nil)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		fmt.Fprintf(b, "job %s: v%d type=%s status=%s", j.GetId(), j.GetVersion(),
			pb.EnumWord(j.GetType()), pb.EnumWord(j.GetStatus()))
		if j.GetStop() {
			b.WriteString(" stop")
		}
		fmt.Fprintf(b, " submitted=%d create=%d modify=%d job-modify=%d\n",
			j.GetSubmittedAt(), j.GetCreateIndex(), j.GetModifyIndex(), j.GetJobModifyIndex())
		versions, err := st.JobVersions(nil, j.GetId())
		if err != nil {
			return err
		}
		for _, v := range versions {
			fmt.Fprintf(b, "  version %d: priority=%d", v.GetVersion(), v.GetPriority())
			if v.GetStop() {
				b.WriteString(" stop")
			}
			fmt.Fprintf(b, " job-modify=%d\n", v.GetJobModifyIndex())
		}
	}
	evals, _, err := st.EvalsPage(nil, "", 0, nil)
	if err != nil {
		return err
	}
	for _, e := range evals {
		fmt.Fprintf(b, "eval %s: job=%s status=%s trigger=%s", e.GetId(), e.GetJobId(),
			pb.EnumWord(e.GetStatus()), pb.EnumWord(e.GetTriggeredBy()))
		if n := e.GetNodeId(); n != "" {
			fmt.Fprintf(b, " node=%s", n)
		}
		fmt.Fprintf(b, " job-modify=%d create=%d modify=%d\n", e.GetJobModifyIndex(), e.GetCreateIndex(), e.GetModifyIndex())
	}
	allocs, _, err := st.AllocsPage(nil, "", 0, nil)
	if err != nil {
		return err
	}
	for _, a := range allocs {
		fmt.Fprintf(b, "alloc %s: node=%s job=%s@%d eval=%s desired=%s client=%s cpu=%d mem=%d",
			a.GetId(), a.GetNodeId(), a.GetJobId(), a.GetJobVersion(), a.GetEvalId(),
			pb.EnumWord(a.GetDesiredStatus()),
			pb.EnumWord(a.GetClientStatus()),
			a.GetResources().GetCpuMhz(), a.GetResources().GetMemoryMb())
		for _, f := range []struct{ name, v string }{
			{"desc", a.GetDesiredDescription()}, {"client-desc", a.GetClientDescription()},
			{"prev", a.GetPreviousAllocation()}, {"next", a.GetNextAllocation()}, {"followup", a.GetFollowupEvalId()},
		} {
			if f.v != "" {
				fmt.Fprintf(b, " %s=%q", f.name, f.v)
			}
		}
		if tr := a.GetDesiredTransition(); tr != nil {
			fmt.Fprintf(b, " transition=(migrate=%t reschedule=%t no-replace=%t)", tr.GetMigrate(), tr.GetReschedule(), tr.GetNoReplace())
		}
		if ts := a.GetTaskStates(); len(ts) > 0 {
			var parts []string
			for _, name := range sortedKeys(ts) {
				parts = append(parts, name+":"+pb.EnumWord(ts[name].GetState()))
			}
			fmt.Fprintf(b, " tasks=%s", strings.Join(parts, ","))
		}
		fmt.Fprintf(b, " created=%d modified=%d create=%d modify=%d alloc-modify=%d\n",
			a.GetCreatedAt(), a.GetModifiedAt(), a.GetCreateIndex(), a.GetModifyIndex(), a.GetAllocModifyIndex())
	}
	rows, err := st.NodeAllocIndexRows()
	if err != nil {
		return err
	}
	for _, r := range rows {
		fmt.Fprintf(b, "node-allocs %s: index=%d\n", r.GetTable(), r.GetIndex())
	}
	if err := dumpCSIPlugins(b, st); err != nil {
		return err
	}
	return dumpVolumes(b, st)
}

// dumpCSIPlugins prints the plugin table: counts, then each instance and
// allocation on a line of its own.
func dumpCSIPlugins(b *strings.Builder, st stateReader) error {
	plugins, _, err := st.CSIPluginsPage(nil, "", 0, nil)
	if err != nil {
		return err
	}
	for _, p := range plugins {
		if p, err = st.CSIPluginByID(nil, p.GetId()); err != nil {
			return err
		}
		fmt.Fprintf(b, "plugin %s: controllers=%d/%d nodes=%d/%d provider=%q version=%q controller-required=%t schedulable=%t create=%d modify=%d\n",
			p.GetId(), p.GetControllersHealthy(), p.GetControllersExpected(), p.GetNodesHealthy(), p.GetNodesExpected(),
			p.GetProvider(), p.GetVersion(), p.GetControllerRequired(), p.GetSchedulable(), p.GetCreateIndex(), p.GetModifyIndex())
		for _, set := range []struct {
			kind string
			m    map[string]*pb.CSIPluginInfo
		}{{"controller", p.GetControllers()}, {"node", p.GetNodes()}} {
			for _, n := range sortedKeys(set.m) {
				i := set.m[n]
				fmt.Fprintf(b, "  %s on %s: healthy=%t", set.kind, n, i.GetHealthy())
				if d := i.GetHealthDescription(); d != "" {
					fmt.Fprintf(b, " desc=%q", d)
				}
				if a := i.GetAllocId(); a != "" {
					fmt.Fprintf(b, " alloc=%s", a)
				}
				b.WriteString("\n")
			}
		}
		for _, a := range p.GetAllocations() {
			fmt.Fprintf(b, "  alloc %s: node=%s job=%s type=%s healthy=%t\n", a.GetAllocId(), a.GetNodeId(), a.GetJobId(),
				pb.EnumWord(a.GetType()), a.GetHealthy())
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
