package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// A throwaway table and two commands, declared the way a real table and its
// commands are (see "Adding a table and a command" in doc.go), to test what
// tables with compound keys and secondary indexes do inside a raft batch.
// A test claim is a structpb.Struct with string fields volume, alloc, node
// and mode ("read" or "write"): no test-only protobuf messages needed.

func claimField(name string) func(*structpb.Struct) string {
	return func(s *structpb.Struct) string { return s.GetFields()[name].GetStringValue() }
}

var (
	testClaims         = newTable("test_claims", claimField("volume"), claimField("alloc"))
	testClaimsByVolume = testClaims.index("volume", claimField("volume"))
	testClaimsByNode   = testClaims.index("node", claimField("node"), claimField("volume"))
)

const (
	testClaim        MessageType = 0x70
	testClaimRelease MessageType = 0x71
)

// errWriterTaken is the test claim's refusal: the volume has a writer.
var errWriterTaken = errors.New("volume already has a writer")

// applyTestClaim stores a claim, refusing a second writer on a volume: the
// check reads the volume's claims through a secondary index, before
// anything is written.
func applyTestClaim(tx *writeTxn, c *structpb.Struct) error {
	volume, alloc := claimField("volume")(c), claimField("alloc")(c)
	if volume == "" || alloc == "" {
		return fmt.Errorf("%w: claim without volume or alloc", ErrInvalidCommand)
	}
	if claimField("mode")(c) == "write" {
		claims, err := testClaimsByVolume.list(tx, nil, volume)
		if err != nil {
			return err
		}
		for _, other := range claims {
			if claimField("mode")(other) == "write" && claimField("alloc")(other) != alloc {
				return fmt.Errorf("volume %q, alloc %q: %w (alloc %q)", volume, alloc, errWriterTaken, claimField("alloc")(other))
			}
		}
	}
	return testClaims.insert(tx, c)
}

// applyTestClaimRelease removes the claim of (volume, alloc), if any.
func applyTestClaimRelease(tx *writeTxn, c *structpb.Struct) error {
	existing, err := testClaims.first(tx, nil, claimField("volume")(c), claimField("alloc")(c))
	if err != nil || existing == nil {
		return err
	}
	return testClaims.delete(tx, existing)
}

// claimsSchema is the production schema plus the test table and commands.
func claimsSchema() schema {
	s := productionSchema()
	s.tables = append(slices.Clone(s.tables), testClaims)
	s.commands = map[MessageType]command{
		NodeRegister:     commands[NodeRegister],
		testClaim:        newCommand("TestClaim", applyTestClaim),
		testClaimRelease: newCommand("TestClaimRelease", applyTestClaimRelease),
	}
	return s
}

func claimMsg(t testing.TB, volume, alloc, node, mode string) *structpb.Struct {
	s, err := structpb.NewStruct(map[string]any{"volume": volume, "alloc": alloc, "node": node, "mode": mode})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claimLog is a raft entry at index carrying a test command.
func claimLog(t testing.TB, index uint64, typ MessageType, volume, alloc, node, mode string) *raft.Log {
	body, err := encodeOptions.Marshal(claimMsg(t, volume, alloc, node, mode))
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: append([]byte{byte(typ)}, body...)}
}

// claimsFSM is an FSM over claimsSchema whose log lines go to logs.
func claimsFSM(logs *bytes.Buffer) *FSM {
	return newFSM(hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}), claimsSchema())
}

// claimKeys lists the claims of a volume ("" for every claim) as
// volume/alloc/mode.
func claimKeys(t *testing.T, f *FSM, volume string) []string {
	t.Helper()
	var claims []*structpb.Struct
	var err error
	if volume == "" {
		claims, err = testClaims.list(f.State(), nil)
	} else {
		claims, err = testClaimsByVolume.list(f.State(), nil, volume)
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range claims {
		out = append(out, claimField("volume")(c)+"/"+claimField("alloc")(c)+"/"+claimField("mode")(c))
	}
	return out
}

func results(t *testing.T, out []any) []error {
	t.Helper()
	errs := make([]error, len(out))
	for i, r := range out {
		res, ok := r.(*ApplyResult)
		if !ok {
			t.Fatalf("response %d is %#v", i, r)
		}
		errs[i] = res.Err
	}
	return errs
}

// wantErrs checks each entry's error against want (nil: applied), by
// errors.Is, and returns the errors for closer checks.
func wantErrs(t *testing.T, out []any, want ...error) []error {
	t.Helper()
	errs := results(t, out)
	for i, w := range want {
		if !errors.Is(errs[i], w) || (w == nil) != (errs[i] == nil) {
			t.Errorf("entry %d: %v, want %v", i+1, errs[i], w)
		}
	}
	return errs
}

// TestBatchIndexReadRefusesSecondWriter applies two claims for writing on
// one volume in ONE raft batch: the second must be refused, because the
// apply function's read through the volume index sees the first claim,
// written earlier in the batch and not yet committed. The batch's other
// commands (a claim on another volume, a reader on the contended one) apply,
// and the refusal does not make the batch redo itself entry by entry: the
// refused command wrote nothing.
func TestBatchIndexReadRefusesSecondWriter(t *testing.T) {
	var logs bytes.Buffer
	f := claimsFSM(&logs)
	errs := wantErrs(t, f.ApplyBatch([]*raft.Log{
		claimLog(t, 1, testClaim, "v1", "a1", "n1", "write"),
		claimLog(t, 2, testClaim, "v2", "a3", "n1", "write"),
		claimLog(t, 3, testClaim, "v1", "a2", "n2", "write"),
		claimLog(t, 4, testClaim, "v1", "a4", "n2", "read"),
	}), nil, nil, errWriterTaken, nil)
	if err := errs[2]; err == nil || !strings.Contains(err.Error(), `volume "v1", alloc "a2"`) || !strings.Contains(err.Error(), `alloc "a1"`) {
		t.Errorf("refusal %q does not name the volume, the alloc and the holder", err)
	}
	if got, want := claimKeys(t, f, ""), []string{"v1/a1/write", "v1/a4/read", "v2/a3/write"}; !slices.Equal(got, want) {
		t.Errorf("claims after the batch = %v, want %v", got, want)
	}
	if strings.Contains(logs.String(), "entry by entry") {
		t.Errorf("a refusal before writing made the batch fall back:\n%s", logs.String())
	}
	if idx, _ := f.State().Index("test_claims"); idx != 4 {
		t.Errorf("test_claims index = %d, want 4", idx)
	}
}

// TestSeparateBatchesRefuseSecondWriter is the same pair in two batches:
// the read then sees the committed claim.
func TestSeparateBatchesRefuseSecondWriter(t *testing.T) {
	var logs bytes.Buffer
	f := claimsFSM(&logs)
	if errs := results(t, f.ApplyBatch([]*raft.Log{claimLog(t, 1, testClaim, "v1", "a1", "n1", "write")})); errs[0] != nil {
		t.Fatal(errs[0])
	}
	errs := results(t, f.ApplyBatch([]*raft.Log{claimLog(t, 2, testClaim, "v1", "a2", "n2", "write")}))
	if !errors.Is(errs[0], errWriterTaken) {
		t.Errorf("second writer in its own batch: %v, want %v", errs[0], errWriterTaken)
	}
	if res := f.ApplyLog(claimLog(t, 3, testClaim, "v1", "a2", "n2", "write")); !errors.Is(res.Err, errWriterTaken) {
		t.Errorf("second writer applied alone: %v, want %v", res.Err, errWriterTaken)
	}
	if got, want := claimKeys(t, f, "v1"), []string{"v1/a1/write"}; !slices.Equal(got, want) {
		t.Errorf("claims of v1 = %v, want %v", got, want)
	}
}

// TestBatchIndexReadSeesDeletes releases a writer and claims the volume
// for another alloc in one batch: the index read must see the delete too.
func TestBatchIndexReadSeesDeletes(t *testing.T) {
	var logs bytes.Buffer
	f := claimsFSM(&logs)
	wantErrs(t, f.ApplyBatch([]*raft.Log{
		claimLog(t, 1, testClaim, "v1", "a1", "n1", "write"),
		claimLog(t, 2, testClaimRelease, "v1", "a1", "", ""),
		claimLog(t, 3, testClaim, "v1", "a2", "n2", "write"),
		claimLog(t, 4, testClaim, "v1", "a1", "n1", "write"),
	}), nil, nil, nil, errWriterTaken)
	if got, want := claimKeys(t, f, "v1"), []string{"v1/a2/write"}; !slices.Equal(got, want) {
		t.Errorf("claims of v1 = %v, want %v", got, want)
	}
}

// TestTableReads covers the typed reads of a table with a compound primary
// key and secondary indexes: by whole key, by a prefix of the parts, by a
// compound secondary index and a prefix of it, from a lower bound, and a
// page with a filter.
func TestTableReads(t *testing.T) {
	var logs bytes.Buffer
	f := claimsFSM(&logs)
	var batch []*raft.Log
	for i, c := range [][4]string{
		{"v1", "a1", "n1", "read"}, {"v1", "a2", "n2", "read"}, {"v2", "a1", "n1", "write"},
		{"v2", "a3", "n2", "read"}, {"v3", "a4", "", "read"}, {"v1", "a5", "n1", "write"},
	} {
		batch = append(batch, claimLog(t, uint64(i+1), testClaim, c[0], c[1], c[2], c[3]))
	}
	for i, err := range results(t, f.ApplyBatch(batch)) {
		if err != nil {
			t.Fatalf("entry %d: %v", i+1, err)
		}
	}
	st := f.State()
	keys := func(claims []*structpb.Struct, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range claims {
			out = append(out, claimField("volume")(c)+"/"+claimField("alloc")(c))
		}
		return strings.Join(out, " ")
	}
	if c, err := testClaims.first(st, nil, "v2", "a3"); err != nil || claimField("node")(c) != "n2" {
		t.Errorf("first(v2, a3) = %v, %v", c, err)
	}
	if c, err := testClaims.first(st, nil, "v2", "a2"); err != nil || c != nil {
		t.Errorf("first(v2, a2) = %v, %v; want nothing", c, err)
	}
	if _, err := testClaims.first(st, nil, "v2"); err == nil {
		t.Error("first by one part of a two-part key succeeded")
	}
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"primary, whole table", keys(testClaims.list(st, nil)), "v1/a1 v1/a2 v1/a5 v2/a1 v2/a3 v3/a4"},
		{"primary, prefix v1", keys(testClaims.list(st, nil, "v1")), "v1/a1 v1/a2 v1/a5"},
		{"primary, whole key", keys(testClaims.list(st, nil, "v2", "a1")), "v2/a1"},
		{"volume index", keys(testClaimsByVolume.list(st, nil, "v2")), "v2/a1 v2/a3"},
		// Node and volume: rows sort by node, then volume, then primary key.
		{"node index, prefix n1", keys(testClaimsByNode.list(st, nil, "n1")), "v1/a1 v1/a5 v2/a1"},
		{"node index, whole key", keys(testClaimsByNode.list(st, nil, "n2", "v2")), "v2/a3"},
		// v3/a4 has no node: it is in no node's list.
		{"node index, every row", keys(testClaimsByNode.list(st, nil)), "v1/a1 v1/a5 v2/a1 v1/a2 v2/a3"},
		{"node index, unknown node", keys(testClaimsByNode.list(st, nil, "n9")), ""},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}

	var from []string
	err := testClaims.primary.ascend(st, nil, []string{"v1", "a3"}, func(c *structpb.Struct) bool {
		from = append(from, claimField("volume")(c)+"/"+claimField("alloc")(c))
		return len(from) < 3
	})
	if err != nil || strings.Join(from, " ") != "v1/a5 v2/a1 v2/a3" {
		t.Errorf("ascend from v1/a3, three rows: %v, %v", from, err)
	}

	reads := func(c *structpb.Struct) bool { return claimField("mode")(c) == "read" }
	var pages []string
	var next []string
	for {
		rows, n, err := testClaims.page(st, nil, next, 2, reads)
		pages = append(pages, keys(rows, err)+fmt.Sprintf(" next=%q", n))
		if n == nil {
			break
		}
		next = n
	}
	if got, want := strings.Join(pages, " | "), `v1/a1 v1/a2 next=["v2" "a3"] | v2/a3 v3/a4 next=[]`; got != want {
		t.Errorf("pages of read claims:\n%s\nwant\n%s", got, want)
	}
}

// TestKeyIndexEncoding checks what lookups by a prefix of the parts rely
// on: a key's parts sort as the strings do, part by part; a prefix of the
// parts is a byte prefix of the key and of nothing else, even when a part
// holds NUL bytes; a row with an empty part is in no index.
func TestKeyIndexEncoding(t *testing.T) {
	x := testClaims.primary.key
	key := func(volume, alloc string) string {
		ok, k, err := x.FromObject(claimMsg(t, volume, alloc, "", ""))
		if err != nil || !ok {
			t.Fatalf("key of %q/%q: %t %v", volume, alloc, ok, err)
		}
		args, err := x.FromArgs(volume, alloc)
		if err != nil || string(args) != string(k) {
			t.Fatalf("FromArgs(%q, %q) = %q, %v; FromObject gives %q", volume, alloc, args, err, k)
		}
		return string(k)
	}
	prefix := func(parts ...any) string {
		p, err := x.PrefixFromArgs(parts...)
		if err != nil {
			t.Fatal(err)
		}
		return string(p)
	}
	sorted := [][2]string{{"a", "z"}, {"a\x00", "a"}, {"a\x00b", "x"}, {"ab", "a"}, {"b", "\x00"}, {"b", "\x00\x00"}, {"b", "a"}}
	for i := 1; i < len(sorted); i++ {
		lo, hi := sorted[i-1], sorted[i]
		if key(lo[0], lo[1]) >= key(hi[0], hi[1]) {
			t.Errorf("key %q does not sort before %q", lo, hi)
		}
	}
	for _, k := range sorted {
		for _, other := range sorted {
			hasPrefix := strings.HasPrefix(key(other[0], other[1]), prefix(k[0]))
			if hasPrefix != (other[0] == k[0]) {
				t.Errorf("key of %q starts with the prefix of %q: %t", other, k[0], hasPrefix)
			}
		}
	}
	if ok, _, err := x.FromObject(claimMsg(t, "v1", "", "", "")); ok || err != nil {
		t.Errorf("a row with an empty key part is indexed (%v)", err)
	}
	for _, args := range [][]any{{"v1"}, {"v1", "a1", "x"}, {"v1", 7}} {
		if _, err := x.FromArgs(args...); err == nil {
			t.Errorf("FromArgs(%v) succeeded", args)
		}
	}
	if _, err := x.PrefixFromArgs("a", "b", "c"); err == nil {
		t.Error("PrefixFromArgs with more parts than the key succeeded")
	}
	if _, _, err := x.FromObject(&pb.Node{Id: "n1"}); err == nil {
		t.Error("FromObject accepted a row of another type")
	}
}

// TestTableDeclarationsRefuseMistakes checks that a table declared wrong
// fails where it is declared, so every test catches it.
func TestTableDeclarationsRefuseMistakes(t *testing.T) {
	mustPanic := func(what string, fn func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", what)
			}
		}()
		fn()
	}
	mustPanic("a table without a primary key", func() { newTable[*pb.Node]("x") })
	tbl := newTable("x", (*pb.Node).GetId)
	tbl.index("name", (*pb.Node).GetName)
	mustPanic("an index declared twice", func() { tbl.index("name", (*pb.Node).GetName) })
	mustPanic("an index named id", func() { tbl.index(indexID, (*pb.Node).GetName) })
	mustPanic("an index without parts", func() { tbl.uniqueIndex("empty") })
	if _, err := memdb.NewMemDB(schema{tables: []tableDef{tbl}}.memdb()); err != nil {
		t.Errorf("a valid declaration gives an invalid memdb schema: %v", err)
	}
}

// TestUniqueIndexRefusesADuplicate checks a unique secondary index: a
// second row with the same key is refused by the insert.
func TestUniqueIndexRefusesADuplicate(t *testing.T) {
	tbl := newTable("nodes_by_name", (*pb.Node).GetId)
	byName := tbl.uniqueIndex("name", (*pb.Node).GetName)
	st := newStateStore(schema{tables: []tableDef{tbl}})
	tx := st.beginWrite()
	defer tx.abort()
	if err := tbl.insert(tx, &pb.Node{Id: "n1", Name: "alpha"}); err != nil {
		t.Fatal(err)
	}
	if n, err := byName.first(tx, nil, "alpha"); err != nil || n.GetId() != "n1" {
		t.Errorf("first by unique name in the transaction = %v, %v", n, err)
	}
	writes := tx.writes
	if err := tbl.insert(tx, &pb.Node{Id: "n2", Name: "alpha"}); !errors.Is(err, ErrDuplicateKey) ||
		!strings.Contains(err.Error(), `nodes_by_name row "n2" has name ["alpha"], as row "n1" does`) {
		t.Errorf("a second row with the same unique key: %v, want ErrDuplicateKey naming both rows", err)
	}
	if tx.writes != writes {
		t.Error("the refused insert counted as a write: its batch would be redone entry by entry")
	}
	// The row itself may keep its key.
	if err := tbl.insert(tx, &pb.Node{Id: "n1", Name: "alpha", HttpAddr: "x"}); err != nil {
		t.Errorf("updating the row that holds the key: %v", err)
	}
}

// claimsSnapshot is a snapshot of an FSM with the test table holding
// claims, and nodes and servers.
func claimsSnapshot(t *testing.T) []byte {
	var logs bytes.Buffer
	f := claimsFSM(&logs)
	node, err := encodeOptions.Marshal(&pb.NodeRegisterCommand{Node: &pb.Node{Id: "n1", Status: pb.NodeStatus_NODE_STATUS_READY}})
	if err != nil {
		t.Fatal(err)
	}
	errs := results(t, f.ApplyBatch([]*raft.Log{
		claimLog(t, 1, testClaim, "v1", "a1", "n1", "write"),
		{Index: 2, Type: raft.LogCommand, Data: append([]byte{byte(NodeRegister)}, node...)},
		claimLog(t, 3, testClaim, "v2", "a2", "n1", "read"),
	}))
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, f.State().Snapshot()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRestoreSkipsUnknownTable restores a snapshot written by a server
// with one more table than this one: the known tables are restored intact,
// the unknown table's rows and index are skipped and counted in a log line.
func TestRestoreSkipsUnknownTable(t *testing.T) {
	snap := claimsSnapshot(t)
	var logs bytes.Buffer
	f := New(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}))
	if err := f.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	n, err := f.State().NodeByID(nil, "n1")
	if err != nil || n == nil || n.GetCreateIndex() != 2 {
		t.Errorf("node n1 after restore: %v, %v", n, err)
	}
	if idx, _ := f.State().Index(TableNodes); idx != 2 {
		t.Errorf("nodes index = %d, want 2", idx)
	}
	if latest, _ := f.State().LatestIndex(); latest != 2 {
		t.Errorf("latest index = %d, want 2: the unknown table's index must not count", latest)
	}
	if line := logs.String(); !strings.Contains(line, "skipped their records: version=2 test_claims=3") {
		t.Errorf("log does not count the skipped records (two rows and an index):\n%s", line)
	}

	// The server that knows the table restores it whole.
	g := claimsFSM(&logs)
	if err := g.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatalf("Restore with the table known: %v", err)
	}
	if got, want := claimKeys(t, g, ""), []string{"v1/a1/write", "v2/a2/read"}; !slices.Equal(got, want) {
		t.Errorf("restored claims = %v, want %v", got, want)
	}
	if got, _ := testClaimsByNode.list(g.State(), nil, "n1"); len(got) != 2 {
		t.Errorf("restored claims are not in the node index: %v", got)
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// testClaimUnchecked stores a claim without validating it: an apply
// function that forgot a check, for the store's own guards to catch.
const testClaimUnchecked MessageType = 0x72

// TestInsertRefusesIncompleteKeyBeforeWriting applies, in one batch, a
// claim whose alloc is empty through a command that does not check it:
// insert refuses it with ErrInvalidCommand naming the table and the empty
// part, before counting a write, so the batch carries on instead of
// redoing itself entry by entry.
func TestInsertRefusesIncompleteKeyBeforeWriting(t *testing.T) {
	var logs bytes.Buffer
	s := claimsSchema()
	s.commands[testClaimUnchecked] = newCommand("TestClaimUnchecked", func(tx *writeTxn, c *structpb.Struct) error {
		return testClaims.insert(tx, c)
	})
	f := newFSM(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug}), s)
	errs := results(t, f.ApplyBatch([]*raft.Log{
		claimLog(t, 1, testClaim, "v1", "a1", "n1", "read"),
		claimLog(t, 2, testClaimUnchecked, "v1", "", "n1", "read"),
		claimLog(t, 3, testClaim, "v2", "a2", "n1", "read"),
	}))
	if err := errs[1]; !errors.Is(err, ErrInvalidCommand) || errcode.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), `test_claims row "v1"/"": part 2 of 2 of its primary key is empty`) {
		t.Errorf("claim without an alloc: %v (code %s), want ErrInvalidCommand naming the table and the part", err, errcode.Code(err))
	}
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("the batch's other claims: %v, %v", errs[0], errs[2])
	}
	if strings.Contains(logs.String(), "entry by entry") {
		t.Errorf("the refused insert made the batch fall back:\n%s", logs.String())
	}
	if got, want := claimKeys(t, f, ""), []string{"v1/a1/read", "v2/a2/read"}; !slices.Equal(got, want) {
		t.Errorf("claims after the batch = %v, want %v", got, want)
	}
}

// TestUniqueKeyMovesAndIsReused changes a row's unique key, then gives
// the key it left to another row, and deletes a row and gives its key to
// another: each key stays reachable, and the key still held is still
// refused to a third row, in the transaction and after it commits.
func TestUniqueKeyMovesAndIsReused(t *testing.T) {
	tbl := newTable("nodes_by_name", (*pb.Node).GetId)
	byName := tbl.uniqueIndex("name", (*pb.Node).GetName)
	st := newStateStore(schema{tables: []tableDef{tbl}})
	name := func(src txnSource, n string) string {
		t.Helper()
		row, err := byName.first(src, nil, n)
		if err != nil {
			t.Fatal(err)
		}
		return row.GetId()
	}
	tx := st.beginWrite()
	defer tx.abort()
	for _, n := range []*pb.Node{
		{Id: "n1", Name: "alpha"},
		{Id: "n1", Name: "beta"},  // alpha moves to beta
		{Id: "n2", Name: "alpha"}, // and alpha is free again
		{Id: "n3", Name: "gamma"},
	} {
		if err := tbl.insert(tx, n); err != nil {
			t.Fatalf("insert %s/%s: %v", n.GetId(), n.GetName(), err)
		}
	}
	gamma, err := tbl.first(tx, nil, "n3")
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.delete(tx, gamma); err != nil {
		t.Fatal(err)
	}
	if err := tbl.insert(tx, &pb.Node{Id: "n4", Name: "gamma"}); err != nil {
		t.Fatalf("reusing the name of a deleted row: %v", err)
	}
	check := func(when string, src txnSource) {
		t.Helper()
		for n, want := range map[string]string{"alpha": "n2", "beta": "n1", "gamma": "n4"} {
			if got := name(src, n); got != want {
				t.Errorf("%s: name %s belongs to %q, want %q", when, n, got, want)
			}
		}
		rows, err := byName.list(src, nil)
		if err != nil || len(rows) != 3 {
			t.Errorf("%s: %d rows in the name index (%v), want 3", when, len(rows), err)
		}
	}
	check("in the transaction", tx)
	if err := tbl.insert(tx, &pb.Node{Id: "n5", Name: "beta"}); !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("a third row taking the moved key: %v, want ErrDuplicateKey", err)
	}
	if err := tx.commit(); err != nil {
		t.Fatal(err)
	}
	check("committed", st)
	tx = st.beginWrite()
	defer tx.abort()
	if err := tbl.insert(tx, &pb.Node{Id: "n5", Name: "alpha"}); !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("a third row taking the reused key: %v, want ErrDuplicateKey", err)
	}
	// Committed rows moving and going in a new transaction: reads by the
	// unique key inside it answer from what it wrote, not from the commit.
	n2, err := tbl.first(tx, nil, "n2")
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.delete(tx, n2); err != nil {
		t.Fatal(err)
	}
	if err := tbl.insert(tx, &pb.Node{Id: "n1", Name: "delta"}); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[string]string{"alpha": "", "beta": "", "delta": "n1", "gamma": "n4"} {
		if got := name(tx, n); got != want {
			t.Errorf("after deleting n2 and renaming n1: name %s belongs to %q, want %q", n, got, want)
		}
	}
	if err := tbl.insert(tx, &pb.Node{Id: "n5", Name: "beta"}); err != nil {
		t.Errorf("taking the key a committed row left: %v", err)
	}
	if got := name(tx, "beta"); got != "n5" {
		t.Errorf("name beta belongs to %q, want n5", got)
	}
}

// TestBatchPrefixReadsKeepPartsApart writes claims on volumes vol10 and
// vol1 in one batch: reads by vol1, through the primary key and through
// the indexes, inside the batch, see vol1's claims and not vol10's, and a
// writer on vol10 does not stop one on vol1.
func TestBatchPrefixReadsKeepPartsApart(t *testing.T) {
	var logs bytes.Buffer
	f := claimsFSM(&logs)
	errs := results(t, f.ApplyBatch([]*raft.Log{
		claimLog(t, 1, testClaim, "vol10", "a1", "n1", "write"),
		claimLog(t, 2, testClaim, "vol1", "a2", "n1", "write"),
		claimLog(t, 3, testClaim, "vol10", "a3", "n1", "read"),
	}))
	for i, err := range errs {
		if err != nil {
			t.Errorf("entry %d: %v", i+1, err)
		}
	}
	tx := f.State().beginWrite()
	defer tx.abort()
	if err := testClaims.insert(tx, claimMsg(t, "vol1", "a4", "n1", "read")); err != nil {
		t.Fatal(err)
	}
	keys := func(claims []*structpb.Struct, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range claims {
			out = append(out, claimField("volume")(c)+"/"+claimField("alloc")(c))
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct{ name, got, want string }{
		{"primary, prefix vol1", keys(testClaims.list(tx, nil, "vol1")), "vol1/a2 vol1/a4"},
		{"primary, prefix vol10", keys(testClaims.list(tx, nil, "vol10")), "vol10/a1 vol10/a3"},
		{"volume index, vol1", keys(testClaimsByVolume.list(tx, nil, "vol1")), "vol1/a2 vol1/a4"},
		{"node index, n1 and vol1", keys(testClaimsByNode.list(tx, nil, "n1", "vol1")), "vol1/a2 vol1/a4"},
		{"node index, n1", keys(testClaimsByNode.list(tx, nil, "n1")), "vol1/a2 vol1/a4 vol10/a1 vol10/a3"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
