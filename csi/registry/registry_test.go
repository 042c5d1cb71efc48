package registry

import (
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

func TestRegisterListDeregister(t *testing.T) {
	store := newFakeStore()
	r := New(store)
	mustRegister(t, r, reg(node, "hostpath", "a1", 10))
	mustRegister(t, r, reg(controller, "ebs", "a2", 11))
	mustRegister(t, r, reg(node, "ebs", "a3", 12))

	if got, want := keys(r.List(node)), []string{
		key(node, "ebs", "a3").String(), key(node, "hostpath", "a1").String(),
	}; !slices.Equal(got, want) {
		t.Fatalf("List(node) = %q, want %q", got, want)
	}
	if got, want := keys(r.List(controller)), []string{key(controller, "ebs", "a2").String()}; !slices.Equal(got, want) {
		t.Fatalf("List(controller) = %q, want %q", got, want)
	}
	if got := r.List(anyType); len(got) != 3 {
		t.Fatalf("List(any) = %q, want all 3", keys(got))
	}
	e, ok := r.Serving(node, "hostpath")
	if !ok || !proto.Equal(e.Registration, reg(node, "hostpath", "a1", 10)) || e.NeedsProbe {
		t.Fatalf("Serving(node, hostpath) = %v, %v; want a1's registration as given, not needing a probe", e, ok)
	}
	if _, ok := r.Serving(controller, "hostpath"); ok {
		t.Fatal("Serving(controller, hostpath) found an entry; hostpath registered only a node")
	}

	if err := r.Deregister("a1", "hostpath"); err != nil {
		t.Fatal(err)
	}
	if err := r.Deregister("a1", "hostpath"); err != nil { // a stop hook that runs twice
		t.Fatalf("second deregister: %v", err)
	}
	if _, ok := r.Serving(node, "hostpath"); ok {
		t.Fatal("hostpath still served after its only alloc deregistered")
	}
	if store.has(key(node, "hostpath", "a1")) {
		t.Fatal("deregistered entry still in the store")
	}
	if got := keys(r.List(node)); !slices.Equal(got, []string{key(node, "ebs", "a3").String()}) {
		t.Fatalf("List(node) after deregister = %q", got)
	}
}

func TestMonolithRegistersControllerAndNode(t *testing.T) {
	store := newFakeStore()
	r := New(store)
	mono := reg(monolith, "hostpath", "a1", 10)
	mustRegister(t, r, mono)
	mustRegister(t, r, reg(node, "other", "a1", 10)) // a second plugin task of the same alloc

	for _, typ := range []pb.CSIPluginType{controller, node} {
		e, ok := r.Serving(typ, "hostpath")
		if !ok {
			t.Fatalf("monolith not served as %s", typeName(typ))
		}
		want := proto.Clone(mono).(*pb.CSIPluginRegistration)
		want.Type = typ
		if !proto.Equal(e.Registration, want) {
			t.Errorf("%s entry = %v, want %v", typeName(typ), e.Registration, want)
		}
		if !store.has(key(typ, "hostpath", "a1")) {
			t.Errorf("%s entry of the monolith not stored", typeName(typ))
		}
	}
	// The monolith's two entries are one store write, controller first.
	if got := store.opLog()[:2]; !slices.Equal(got, []string{
		"put " + key(controller, "hostpath", "a1").String(), "put " + key(node, "hostpath", "a1").String(),
	}) {
		t.Errorf("store writes = %q", got)
	}

	if err := r.Deregister("a1", "hostpath"); err != nil {
		t.Fatal(err)
	}
	if got := keys(r.List(anyType)); !slices.Equal(got, []string{key(node, "other", "a1").String()}) {
		t.Fatalf("after deregistering the monolith: %q, want only the alloc's other plugin", got)
	}
	if err := r.DeregisterAlloc("a1"); err != nil {
		t.Fatal(err)
	}
	if got := r.List(anyType); len(got) != 0 {
		t.Fatalf("after DeregisterAlloc: %q", keys(got))
	}
}

func TestNewestHealthyAllocServes(t *testing.T) {
	r := New(newFakeStore())
	old, upd := reg(node, "hostpath", "old", 10), reg(node, "hostpath", "new", 20)
	mustRegister(t, r, old)
	serving := func() string {
		t.Helper()
		e, ok := r.Serving(node, "hostpath")
		if !ok {
			t.Fatal("hostpath not served")
		}
		return e.Registration.GetAllocId()
	}
	if got := serving(); got != "old" {
		t.Fatalf("serving %s, want old (the only one)", got)
	}
	mustRegister(t, r, upd)
	if got := serving(); got != "new" {
		t.Fatalf("serving %s after the update registered, want new", got)
	}
	// Both stay listed, the serving one first.
	if got := keys(r.List(node)); !slices.Equal(got, []string{key(node, "hostpath", "new").String(), key(node, "hostpath", "old").String()}) {
		t.Fatalf("List = %q", got)
	}
	if err := r.SetHealth("new", "hostpath", false, "probe: not ready"); err != nil {
		t.Fatal(err)
	}
	if got := serving(); got != "old" {
		t.Fatalf("serving %s while new is unhealthy, want old", got)
	}
	if err := r.SetHealth("old", "hostpath", false, "probe: deadline exceeded"); err != nil {
		t.Fatal(err)
	}
	e, _ := r.Serving(node, "hostpath")
	if e.Registration.GetAllocId() != "new" || e.Registration.GetHealthy() || e.Registration.GetHealthDescription() != "probe: not ready" {
		t.Fatalf("none healthy: serving %v, want new (the newest) shown unhealthy with its reason", e.Registration)
	}
	if err := r.SetHealth("new", "hostpath", true, ""); err != nil {
		t.Fatal(err)
	}
	// The old alloc's task restarts: it registers later, but its alloc is
	// still the older one.
	restarted := reg(node, "hostpath", "old", 10)
	restarted.RegisteredAt = 5000
	mustRegister(t, r, restarted)
	if got := serving(); got != "new" {
		t.Fatalf("serving %s after the old task re-registered, want new (newer alloc)", got)
	}
	if err := r.Deregister("new", "hostpath"); err != nil {
		t.Fatal(err)
	}
	if got := serving(); got != "old" {
		t.Fatalf("serving %s after new's task stopped, want old", got)
	}
	if err := r.Deregister("old", "hostpath"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Serving(node, "hostpath"); ok {
		t.Fatal("served after both deregistered")
	}
}

func TestWithoutCreateIndexTheLaterRegistrationServes(t *testing.T) {
	r := New(newFakeStore())
	a, b := reg(controller, "p", "a", 0), reg(controller, "p", "b", 0)
	a.RegisteredAt, b.RegisteredAt = 200, 100
	mustRegister(t, r, a)
	mustRegister(t, r, b)
	if e, _ := r.Serving(controller, "p"); e.Registration.GetAllocId() != "a" {
		t.Fatalf("serving %s, want a (registered at 200, after b)", e.Registration.GetAllocId())
	}
	// Equal times: the one registered last.
	c := reg(controller, "p", "c", 0)
	c.RegisteredAt = 200
	mustRegister(t, r, c)
	if e, _ := r.Serving(controller, "p"); e.Registration.GetAllocId() != "c" {
		t.Fatalf("serving %s, want c (same time as a, registered after it)", e.Registration.GetAllocId())
	}
}

func TestRegisterStampsRegisteredAt(t *testing.T) {
	at := time.Unix(1700000000, 42)
	r := New(newFakeStore(), WithClock(func() time.Time { return at }))
	g := reg(monolith, "p", "a", 1)
	g.RegisteredAt = 0
	mustRegister(t, r, g)
	for _, e := range r.List(anyType) {
		if e.Registration.GetRegisteredAt() != at.UnixNano() {
			t.Errorf("%s registered_at = %d, want the clock's %d", e.Key(), e.Registration.GetRegisteredAt(), at.UnixNano())
		}
	}
	if g.GetRegisteredAt() != 0 || g.GetType() != monolith {
		t.Errorf("Register changed the caller's message: %v", g)
	}
}

func TestRegisterRefusesInvalid(t *testing.T) {
	store := newFakeStore()
	r := New(store)
	for name, mutate := range map[string]func(*pb.CSIPluginRegistration){
		"no type":          func(g *pb.CSIPluginRegistration) { g.Type = anyType },
		"no plugin id":     func(g *pb.CSIPluginRegistration) { g.PluginId = "" },
		"no alloc id":      func(g *pb.CSIPluginRegistration) { g.AllocId = "" },
		"alloc id with /":  func(g *pb.CSIPluginRegistration) { g.AllocId = "a/b" },
		"no endpoint":      func(g *pb.CSIPluginRegistration) { g.Endpoint = "" },
		"unknown type 999": func(g *pb.CSIPluginRegistration) { g.Type = 999 },
	} {
		g := reg(node, "p", "a", 1)
		mutate(g)
		if err := r.Register(g); !errors.Is(err, ErrInvalidRegistration) {
			t.Errorf("%s: err = %v, want ErrInvalidRegistration", name, err)
		}
	}
	if got := r.List(anyType); len(got) != 0 || len(store.opLog()) != 0 {
		t.Fatalf("refused registrations left entries %q, store writes %q", keys(got), store.opLog())
	}
}

func TestStoreFailureChangesNothing(t *testing.T) {
	store := newFakeStore()
	r := New(store)
	ctx := t.Context()
	events := r.Subscribe(ctx)

	store.NextPutErr = errDiskFull
	if err := r.Register(reg(monolith, "p", "a", 1)); !errors.Is(err, errDiskFull) {
		t.Fatalf("register with a failing store: err = %v, want the store's error", err)
	}
	if got := r.List(anyType); len(got) != 0 {
		t.Fatalf("entries visible after the store refused them: %q", keys(got))
	}
	mustRegister(t, r, reg(node, "p", "a", 1))
	if ev := next(t, events); ev.Seq != 1 || ev.Kind != EventRegistered || ev.Entry.Key() != key(node, "p", "a") {
		t.Fatalf("first event = %+v, want the successful registration as change 1 (nothing of the refused one)", ev)
	}

	store.NextPutErr = errDiskFull
	if err := r.SetHealth("a", "p", false, "gone"); !errors.Is(err, errDiskFull) {
		t.Fatalf("set health with a failing store: err = %v", err)
	}
	if e, _ := r.Serving(node, "p"); !e.Registration.GetHealthy() {
		t.Fatal("health change visible after the store refused it")
	}
	store.NextDeleteErr = errDiskFull
	if err := r.Deregister("a", "p"); !errors.Is(err, errDiskFull) {
		t.Fatalf("deregister with a failing store: err = %v", err)
	}
	if _, ok := r.Serving(node, "p"); !ok || !store.has(key(node, "p", "a")) {
		t.Fatal("entry gone from the registry though the store still has it")
	}
	if err := r.Deregister("a", "p"); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, events); ev.Seq != 2 || ev.Kind != EventDeregistered {
		t.Fatalf("second event = %+v, want the successful deregistration as change 2", ev)
	}
}

func TestSetHealth(t *testing.T) {
	store := newFakeStore()
	r := New(store)
	if err := r.SetHealth("a", "p", true, ""); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("set health of nothing: err = %v, want ErrNotRegistered", err)
	}
	mustRegister(t, r, reg(monolith, "p", "a", 1))
	writes := len(store.opLog())
	if err := r.SetHealth("a", "p", true, ""); err != nil {
		t.Fatal(err)
	}
	if got := len(store.opLog()); got != writes {
		t.Fatalf("an unchanged health wrote %d records", got-writes)
	}
	if err := r.SetHealth("a", "p", false, "probe: not ready"); err != nil {
		t.Fatal(err)
	}
	for _, e := range r.List(anyType) {
		if e.Registration.GetHealthy() || e.Registration.GetHealthDescription() != "probe: not ready" {
			t.Errorf("%s = %v, want unhealthy with the reason", e.Key(), e.Registration)
		}
	}
	if got := len(store.opLog()) - writes; got != 2 {
		t.Fatalf("health change of a monolith wrote %d records, want 2", got)
	}
}

func TestListedEntriesAreCopies(t *testing.T) {
	r := New(newFakeStore())
	g := reg(node, "p", "a", 1)
	mustRegister(t, r, g)
	g.Endpoint = "changed by the caller"
	r.List(node)[0].Registration.Endpoint = "changed by a reader"
	e, _ := r.Serving(node, "p")
	e.Registration.Healthy = false
	if e, _ := r.Serving(node, "p"); e.Registration.GetEndpoint() != "unix:///data/csi/plugins/a/csi.sock" || !e.Registration.GetHealthy() {
		t.Fatalf("entry changed through a copy: %v", e.Registration)
	}
}
