package registry

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/client/state"
	"berth.dev/berth/rpc/pb"
)

// The client state DB is the registry's store.
var _ Store = (*state.DB)(nil)

func openDB(t *testing.T, path string) *state.DB {
	t.Helper()
	db, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// liveAllocs is an AllocLive answering from a set.
func liveAllocs(ids ...string) AllocLive {
	return func(id string) bool { return slices.Contains(ids, id) }
}

// TestRestoreAcrossClientRestart: entries written by one run of the client
// come back in the next, from the real state DB, with those of gone or
// terminal allocs dropped (from the DB too) and the rest marked for a
// probe.
func TestRestoreAcrossClientRestart(t *testing.T) {
	path := state.Path(t.TempDir())
	db := openDB(t, path)
	r := New(db)
	mono := reg(monolith, "hostpath", "a1", 10)
	mustRegister(t, r, mono)
	mustRegister(t, r, reg(node, "ebs", "a2", 11))
	mustRegister(t, r, reg(node, "ebs", "a3", 12)) // a3 goes terminal while the client is down
	mustRegister(t, r, reg(controller, "nfs", "a4", 13))
	if err := r.SetHealth("a2", "ebs", false, "probe: not ready"); err != nil {
		t.Fatal(err)
	}
	if err := r.Deregister("a4", "nfs"); err != nil { // its task stopped before the restart
		t.Fatal(err)
	}
	before := r.List(anyType)
	if err := db.Close(); err != nil { // the client stops
		t.Fatal(err)
	}

	db = openDB(t, path) // the client starts again
	r = New(db)
	if got := r.List(anyType); len(got) != 0 {
		t.Fatalf("a new registry lists %q before Restore", keys(got))
	}
	events := r.Subscribe(t.Context()) // the plugin manager, started first
	dropped, err := r.Restore(liveAllocs("a1", "a2", "a4"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dropped) != 1 || keyOf(dropped[0]) != key(node, "ebs", "a3") {
		t.Fatalf("dropped %v, want a3's ebs node entry", dropped)
	}

	got := r.List(anyType)
	var want []Entry
	for _, e := range before {
		if e.Registration.GetAllocId() != "a3" {
			want = append(want, e)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("restored %q, want %q", keys(got), keys(want))
	}
	for i := range want {
		if !proto.Equal(got[i].Registration, want[i].Registration) || !got[i].NeedsProbe {
			t.Errorf("restored %v (needs probe %v), want %v needing a probe", got[i].Registration, got[i].NeedsProbe, want[i].Registration)
		}
	}
	if e, _ := r.Serving(node, "ebs"); e.Registration.GetAllocId() != "a2" || e.Registration.GetHealthy() {
		t.Fatalf("ebs served by %v, want a2 as it was before the restart (unhealthy)", e.Registration)
	}
	// The subscriber learns of each restored entry, marked for a probe.
	seen := map[Key]bool{}
	for range want {
		ev := next(t, events)
		if ev.Kind != EventRegistered || !ev.Entry.NeedsProbe {
			t.Fatalf("restore event %+v, want a registration needing a probe", ev)
		}
		seen[ev.Entry.Key()] = true
	}
	for _, e := range want {
		if !seen[e.Key()] {
			t.Errorf("no event for restored %s", e.Key())
		}
	}

	// A probe of a restored plugin clears the mark and is persisted.
	if err := r.SetHealth("a1", "hostpath", true, ""); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []pb.CSIPluginType{controller, node} {
		if e, _ := r.Serving(typ, "hostpath"); e.NeedsProbe || !e.Registration.GetHealthy() {
			t.Errorf("hostpath %s after its probe: needs probe %v, healthy %v", typeName(typ), e.NeedsProbe, e.Registration.GetHealthy())
		}
	}
	if err := r.SetHealth("a2", "ebs", true, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil { // and a second restart
		t.Fatal(err)
	}

	db = openDB(t, path)
	defer db.Close()
	stored, err := db.CSIPluginRegistrations()
	if err != nil {
		t.Fatal(err)
	}
	var storedKeys []string
	for _, s := range stored {
		storedKeys = append(storedKeys, keyOf(s).String()+" healthy="+map[bool]string{true: "yes", false: "no"}[s.GetHealthy()])
	}
	wantStored := []string{
		key(controller, "hostpath", "a1").String() + " healthy=yes",
		key(node, "hostpath", "a1").String() + " healthy=yes",
		key(node, "ebs", "a2").String() + " healthy=yes",
	}
	slices.Sort(storedKeys)
	slices.Sort(wantStored)
	if !slices.Equal(storedKeys, wantStored) {
		t.Fatalf("state db holds %q, want %q (a3 dropped, a2's health persisted)", storedKeys, wantStored)
	}
}

func TestRestoreKeepsWhatRegisteredFirst(t *testing.T) {
	store := newFakeStore()
	old := reg(node, "p", "a1", 1)
	old.Endpoint = "unix:///old.sock"
	if err := store.PutCSIPluginRegistrations(old, reg(node, "q", "a1", 1)); err != nil {
		t.Fatal(err)
	}
	r := New(store)
	mustRegister(t, r, reg(node, "p", "a1", 1)) // the task's hook re-registered before Restore ran
	if _, err := r.Restore(liveAllocs("a1")); err != nil {
		t.Fatal(err)
	}
	p, _ := r.Serving(node, "p")
	if p.NeedsProbe || p.Registration.GetEndpoint() != "unix:///data/csi/plugins/a1/csi.sock" {
		t.Fatalf("p = %v (needs probe %v), want the live registration kept", p.Registration, p.NeedsProbe)
	}
	if q, ok := r.Serving(node, "q"); !ok || !q.NeedsProbe {
		t.Fatalf("q = %v, %v; want restored and needing a probe", q, ok)
	}
	// Restoring again changes nothing.
	events := r.Subscribe(t.Context())
	next(t, events)
	next(t, events) // the snapshot
	if _, err := r.Restore(liveAllocs("a1")); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, r, reg(controller, "marker", "m", 1))
	if ev := next(t, events); ev.Entry.Key() != key(controller, "marker", "m") {
		t.Fatalf("a second Restore sent %s %s", ev.Kind, ev.Entry.Key())
	}
}

func TestRestoreReportsBadRecordsAndRestoresTheRest(t *testing.T) {
	store := newFakeStore()
	if err := store.PutCSIPluginRegistrations(reg(node, "p", "a1", 1), reg(node, "p", "gone", 2)); err != nil {
		t.Fatal(err)
	}
	store.recs[key(node, "", "a9")] = &pb.CSIPluginRegistration{Type: node, AllocId: "a9"} // no plugin id
	readErr := &state.RecordError{Bucket: "csi_plugins", Key: "node/a8/x", Err: errors.New("proto: cannot parse")}
	store.ListErr = readErr
	store.NextDeleteErr = errDiskFull

	r := New(store)
	dropped, err := r.Restore(liveAllocs("a1", "a9"))
	var rerr *state.RecordError
	if !errors.As(err, &rerr) || !errors.Is(err, ErrInvalidRegistration) || !errors.Is(err, errDiskFull) {
		t.Fatalf("err = %v, want the unreadable record, the invalid one and the failed drop", err)
	}
	if len(dropped) != 1 || dropped[0].GetAllocId() != "gone" {
		t.Fatalf("dropped %v, want the entry of alloc gone", dropped)
	}
	if got := keys(r.List(anyType)); !slices.Equal(got, []string{key(node, "p", "a1").String()}) {
		t.Fatalf("restored %q, want only a1's entry", got)
	}
	// The stale entry the store failed to delete is dropped by the next
	// restore.
	if !store.has(key(node, "p", "gone")) {
		t.Fatal("fake store deleted despite its error")
	}
	store.ListErr = nil
	delete(store.recs, key(node, "", "a9"))
	if dropped, err := New(store).Restore(liveAllocs("a1")); err != nil || len(dropped) != 1 || store.has(key(node, "p", "gone")) {
		t.Fatalf("second restore: dropped %v, err %v; want the stale entry deleted", dropped, err)
	}
}

// TestRestoreLeavesLiveEntriesAlone: an entry its task registered before
// Restore is neither replaced nor dropped, whatever the stored copy and the
// liveness function say, so the store keeps every visible entry.
func TestRestoreLeavesLiveEntriesAlone(t *testing.T) {
	store := newFakeStore()
	if err := store.PutCSIPluginRegistrations(reg(node, "p", "a1", 1)); err != nil {
		t.Fatal(err)
	}
	r := New(store)
	mustRegister(t, r, reg(node, "p", "a1", 1))
	dropped, err := r.Restore(liveAllocs()) // the alloc runners do not know a1 yet
	if err != nil || len(dropped) != 0 {
		t.Fatalf("Restore = %v, %v; want nothing dropped", dropped, err)
	}
	if _, ok := r.Serving(node, "p"); !ok || !store.has(key(node, "p", "a1")) {
		t.Fatal("the live entry was dropped by Restore")
	}
}
