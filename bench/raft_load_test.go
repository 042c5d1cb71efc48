package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
)

func TestPercentileNearestRank(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0.001, time.Millisecond}} {
		if got := percentile(lat, tc.q); got != tc.want {
			t.Errorf("p%v of 1..100ms = %v, want %v", tc.q*100, got, tc.want)
		}
	}
	if got := percentile([]time.Duration{7}, 0.99); got != 7 {
		t.Errorf("p99 of one sample = %v, want that sample", got)
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("p50 of nothing = %v, want 0", got)
	}
}

func TestMedianTakesMiddleWithoutSorting(t *testing.T) {
	xs := []float64{3, 1, 2}
	if got := median(xs); got != 2 {
		t.Errorf("median(3,1,2) = %v, want 2", got)
	}
	if xs[0] != 3 {
		t.Error("median reordered its argument")
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2 {
		t.Errorf("median of an even count = %v, want the lower middle 2", got)
	}
}

func TestRatiosPairRunsByRound(t *testing.T) {
	run := func(ops int, cpu time.Duration) loadResult {
		return loadResult{ops: ops, elapsed: time.Second, cpu: cpu, cpuOK: true}
	}
	c := &cellRuns{
		baseline: []loadResult{run(100, 100*time.Millisecond), run(400, 400*time.Millisecond)},
		berth:    []loadResult{run(90, 180*time.Millisecond), run(100, 200*time.Millisecond)},
	}
	rs := c.ratios()
	if len(rs) != 2 || rs[0] != 0.9 || rs[1] != 0.25 {
		t.Errorf("throughput ratios = %v, want [0.9 0.25]", rs)
	}
	cs := c.cpuRatiosOf(c.berth)
	if len(cs) != 2 || cs[0] != 0.5 || cs[1] != 0.5 {
		t.Errorf("CPU ratios = %v, want [0.5 0.5] (1ms/op against 2ms/op)", cs)
	}
	// A floor measured in one round only pairs with that round.
	c.floor = []loadResult{run(50, 100*time.Millisecond)}
	if fs := c.ratiosOf(c.floor); len(fs) != 1 || fs[0] != 0.5 {
		t.Errorf("floor ratios = %v, want [0.5]", fs)
	}
	if got := ratioText(rs); got != "0.25 (0.25–0.90)" {
		t.Errorf("ratioText = %q", got)
	}
}

// TestRunLoadCountsOnlyAppliedCommands runs the bench's own cluster and load
// briefly and checks the count against berth's state: every proposal counted
// registered one node.
func TestRunLoadCountsOnlyAppliedCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raft server on loopback TCP and waits for its election (-short)")
	}
	ctx := t.Context()
	spec, err := realPayload()
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPayloads(spec)
	if err != nil {
		t.Fatal(err)
	}
	var berthFSM *fsm.FSM
	kind := berthKind
	kind.newFSM = func(l hclog.Logger) raft.FSM {
		berthFSM = fsm.New(l)
		return berthFSM
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	c, err := startCluster(ctx, dir, 1, kind, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cluster dir after shutdown: %v, want it removed", err)
		}
	}()

	const proposers = 4
	res, err := runLoad(ctx, c.leader, kind, p, proposers, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.ops < proposers || len(res.lat) != res.ops {
		t.Fatalf("%d ops with %d latencies; want at least one per proposer and one latency each", res.ops, len(res.lat))
	}
	nodes, err := berthFSM.State().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != res.ops {
		t.Errorf("%d nodes registered, run counted %d applied commands", len(nodes), res.ops)
	}
	if res.percentile(0.5) <= 0 || res.percentile(0.99) < res.percentile(0.5) {
		t.Errorf("p50 %v, p99 %v: want 0 < p50 <= p99", res.percentile(0.5), res.percentile(0.99))
	}

	// A command the FSM refuses fails the run instead of counting.
	errRefused := errors.New("refused")
	refusing := kind
	refusing.check = func(resp any) error {
		if err := kind.check(resp); err != nil {
			return err
		}
		return errRefused
	}
	_, err = runLoad(ctx, c.leader, refusing, p, proposers, time.Hour)
	if !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "proposer") {
		t.Errorf("run with a refused command: %v, want errRefused naming the proposer", err)
	}
}

// fakeFuture is a resolved raft future.
type fakeFuture struct {
	err  error
	resp any
}

var _ raft.ApplyFuture = fakeFuture{}

func (f fakeFuture) Error() error  { return f.err }
func (f fakeFuture) Index() uint64 { return 1 }
func (f fakeFuture) Response() any { return f.resp }

// TestWaitAppliedJudgesEachFSMsAnswer checks both sides wait through the
// same code and differ only in how the FSM's answer is read: a raft error
// fails either side, and each side refuses what its FSM would never answer
// for an accepted command.
func TestWaitAppliedJudgesEachFSMsAnswer(t *testing.T) {
	errRaft := errors.New("raft went away")
	errApply := errors.New("refused by the FSM")
	for _, tc := range []struct {
		name    string
		kind    fsmKind
		fut     fakeFuture
		wantErr error // nil: accepted; errAny: any error
	}{
		{"baseline applied", baselineKind, fakeFuture{}, nil},
		{"baseline raft error", baselineKind, fakeFuture{err: errRaft, resp: nil}, errRaft},
		{"baseline odd answer", baselineKind, fakeFuture{resp: &fsm.ApplyResult{}}, errAny},
		{"berth applied", berthKind, fakeFuture{resp: &fsm.ApplyResult{Index: 1}}, nil},
		{"berth refused", berthKind, fakeFuture{resp: &fsm.ApplyResult{Index: 1, Err: errApply}}, errApply},
		{"berth raft error", berthKind, fakeFuture{err: errRaft}, errRaft},
		{"berth no answer", berthKind, fakeFuture{}, fsm.ErrUnexpectedResponse},
		{"berth nil result", berthKind, fakeFuture{resp: (*fsm.ApplyResult)(nil)}, fsm.ErrUnexpectedResponse},
		{"berth foreign answer", berthKind, fakeFuture{resp: "ok"}, fsm.ErrUnexpectedResponse},
	} {
		err := waitApplied(tc.kind, tc.fut)
		switch {
		case tc.wantErr == nil && err != nil:
			t.Errorf("%s: %v, want accepted", tc.name, err)
		case tc.wantErr == errAny && err == nil:
			t.Errorf("%s: accepted, want an error", tc.name)
		case tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
			t.Errorf("%s: %v, want %v", tc.name, err, tc.wantErr)
		}
	}
}

// errAny marks a test case that wants some error, whichever.
var errAny = errors.New("any error")

// TestFloorFSMStoresEveryCommand applies batches to the memdb floor and
// checks every command entry became a row under its own key, and that
// configuration entries are passed over.
func TestFloorFSMStoresEveryCommand(t *testing.T) {
	f := newFloorFSM()
	logs := []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: []byte("a")},
		{Index: 2, Type: raft.LogConfiguration, Data: []byte("conf")},
		{Index: 3, Type: raft.LogCommand, Data: []byte("c")},
	}
	if out := f.ApplyBatch(logs); len(out) != len(logs) {
		t.Fatalf("ApplyBatch returned %d responses for %d entries", len(out), len(logs))
	}
	if resp := f.Apply(&raft.Log{Index: 1 << 40, Type: raft.LogCommand, Data: []byte("d")}); floorKind.check(resp) != nil {
		t.Errorf("Apply answered %v", resp)
	}
	txn := f.db.Txn(false)
	for index, want := range map[uint64]string{1: "a", 3: "c", 1 << 40: "d"} {
		obj, err := txn.First("rows", "id", floorKey(index))
		if err != nil || obj == nil || string(obj.(*floorRow).raw) != want {
			t.Errorf("row for index %d: %v (%v), want %q", index, obj, err, want)
		}
	}
	if obj, _ := txn.First("rows", "id", floorKey(2)); obj != nil {
		t.Errorf("the configuration entry became a row: %v", obj)
	}
	if k := floorKey(1 << 40); len(k) != 37 || string(k) != "00000000-0000-4000-8000-010000000000\x00" {
		t.Errorf("floorKey = %q, want a NUL-terminated 36-byte UUID shape", k)
	}
}
