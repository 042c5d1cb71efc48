package pluginmanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

const (
	controller = pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER
	node       = pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE
	monolith   = pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH
	taskSource = pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK
	adSource   = pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER
)

// waitLimit bounds every wait for a condition: a bound on a hang, not a
// timing assumption.
const waitLimit = 10 * time.Second

var _ registry.Store = (*memStore)(nil)

// memStore is a registry.Store in memory.
type memStore struct {
	mu   sync.Mutex
	recs map[registry.Key]*pb.CSIPluginRegistration
}

func newMemStore() *memStore { return &memStore{recs: map[registry.Key]*pb.CSIPluginRegistration{}} }

func keyOf(r *pb.CSIPluginRegistration) registry.Key {
	return registry.Key{Type: r.GetType(), PluginID: r.GetPluginId(), AllocID: r.GetAllocId()}
}

func (s *memStore) CSIPluginRegistrations() ([]*pb.CSIPluginRegistration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.CSIPluginRegistration
	for _, r := range s.recs {
		out = append(out, proto.Clone(r).(*pb.CSIPluginRegistration))
	}
	return out, nil
}

func (s *memStore) PutCSIPluginRegistrations(regs ...*pb.CSIPluginRegistration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range regs {
		s.recs[keyOf(r)] = proto.Clone(r).(*pb.CSIPluginRegistration)
	}
	return nil
}

func (s *memStore) DeleteCSIPluginRegistrations(regs ...*pb.CSIPluginRegistration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range regs {
		delete(s.recs, keyOf(r))
	}
	return nil
}

// attempt is one call of the fake sender.
type attempt struct {
	set Set
	err error
	at  time.Time
}

// fakeSender records every set it is given; it fails the calls it was
// told to with the errors queued in NextErrs.
type fakeSender struct {
	mu       sync.Mutex
	attempts []attempt
	NextErrs []error
	changed  chan struct{}
}

func newFakeSender() *fakeSender { return &fakeSender{changed: make(chan struct{}, 1)} }

func (f *fakeSender) send(_ context.Context, set Set) error {
	f.mu.Lock()
	var err error
	if len(f.NextErrs) > 0 {
		err, f.NextErrs = f.NextErrs[0], f.NextErrs[1:]
	}
	f.attempts = append(f.attempts, attempt{set: set.Clone(), err: err, at: time.Now()})
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
	return err
}

func (f *fakeSender) failNext(errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.NextErrs = append(f.NextErrs, errs...)
}

func (f *fakeSender) all() []attempt {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]attempt(nil), f.attempts...)
}

// delivered returns the sets the servers accepted, in order.
func (f *fakeSender) delivered() []Set {
	var out []Set
	for _, a := range f.all() {
		if a.err == nil {
			out = append(out, a.set)
		}
	}
	return out
}

// waitDelivered waits until the last delivered set passes check, and
// returns it.
func (f *fakeSender) waitDelivered(t *testing.T, what string, check func(Set) error) Set {
	t.Helper()
	var last Set
	testutil.WaitFor(t, waitLimit, func() error {
		d := f.delivered()
		if len(d) == 0 {
			return fmt.Errorf("%s: nothing delivered yet", what)
		}
		last = d[len(d)-1]
		if err := check(last); err != nil {
			return fmt.Errorf("%s: %w (last set %v)", what, err, render(last))
		}
		return nil
	})
	return last
}

func render(s Set) string {
	out := "controllers{"
	for id, i := range s.Controllers {
		out += fmt.Sprintf(" %s:%s/%v/%q", id, i.GetAllocId(), i.GetHealthy(), i.GetHealthDescription())
	}
	out += " } nodes{"
	for id, i := range s.Nodes {
		out += fmt.Sprintf(" %s:%s/%v/%q", id, i.GetAllocId(), i.GetHealthy(), i.GetHealthDescription())
	}
	return out + " }"
}

// has checks that side holds plugin id from alloc with the health given.
func has(side map[string]*pb.CSIPluginInfo, id, alloc string, healthy bool) error {
	i := side[id]
	switch {
	case i == nil:
		return fmt.Errorf("no %q", id)
	case i.GetAllocId() != alloc:
		return fmt.Errorf("%q from alloc %q, want %q", id, i.GetAllocId(), alloc)
	case i.GetHealthy() != healthy:
		return fmt.Errorf("%q healthy=%v (%q), want %v", id, i.GetHealthy(), i.GetHealthDescription(), healthy)
	}
	return nil
}

// shortDir is a temp dir with a path short enough for unix sockets.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// servePlugin serves a fake plugin on a socket of its own.
func servePlugin(t testing.TB, p *csifake.Plugin) *csifake.Server {
	t.Helper()
	srv, err := p.Listen(filepath.Join(shortDir(t), "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// registration of plugin in alloc, healthy, at endpoint.
func registration(typ pb.CSIPluginType, plugin, alloc, endpoint string, createIndex uint64) *pb.CSIPluginRegistration {
	return &pb.CSIPluginRegistration{Type: typ, PluginId: plugin, AllocId: alloc, Endpoint: endpoint,
		Provider: csifake.Name, ProviderVersion: csifake.VendorVersion, Healthy: true, AllocCreateIndex: createIndex}
}

// startManager starts a manager on reg and adapters (either may be nil)
// sending to a new fake sender, stopped when the test ends.
func startManager(t testing.TB, reg Registry, adapters AdapterSource, tweak func(*Config)) (*Manager, *fakeSender) {
	t.Helper()
	f := newFakeSender()
	cfg := Config{Registry: reg, Adapters: adapters, Send: f.send, Logger: testutil.Logger(t),
		SendRetryStart: 5 * time.Millisecond, SendRetryMax: 50 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Stop)
	return m, f
}

var _ AdapterSource = (*fakeAdapters)(nil)

// fakeAdapters is an AdapterSource of fake plugins, each on its own
// socket; the test sets their states and sends their events.
type fakeAdapters struct {
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	states map[string]AdapterState
	subs   []chan AdapterEvent
}

func newFakeAdapters(t testing.TB, plugins map[string]*csifake.Plugin) *fakeAdapters {
	t.Helper()
	a := &fakeAdapters{conns: map[string]*grpc.ClientConn{}, states: map[string]AdapterState{}}
	for name, p := range plugins {
		srv := servePlugin(t, p)
		cc, err := grpc.NewClient("unix://"+srv.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		a.conns[name] = cc
		a.states[name] = AdapterState{Running: true, Healthy: true}
	}
	return a
}

func (a *fakeAdapters) Names() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for n := range a.conns {
		out = append(out, n)
	}
	return out
}

func (a *fakeAdapters) Conn(name string) (grpc.ClientConnInterface, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.conns[name]; ok {
		return c, nil
	}
	return nil, errors.New("no adapter " + name)
}

func (a *fakeAdapters) State(name string) (AdapterState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.states[name], nil
}

func (a *fakeAdapters) Subscribe() (<-chan AdapterEvent, func()) {
	ch := make(chan AdapterEvent, 16)
	a.mu.Lock()
	a.subs = append(a.subs, ch)
	a.mu.Unlock()
	return ch, func() {}
}

// event sets the adapter's state as the event implies and sends it.
func (a *fakeAdapters) event(name string, kind AdapterEventKind, reason string) {
	a.mu.Lock()
	st := a.states[name]
	st.Healthy, st.Reason = kind == AdapterHealthy, reason
	a.states[name] = st
	subs := append([]chan AdapterEvent(nil), a.subs...)
	a.mu.Unlock()
	for _, ch := range subs {
		ch <- AdapterEvent{Adapter: name, Kind: kind, Reason: reason}
	}
}

// waitCount waits until n sets were delivered.
func waitCount(t *testing.T, f *fakeSender, n int) {
	t.Helper()
	deadline := time.After(waitLimit)
	for len(f.delivered()) < n {
		select {
		case <-f.changed:
		case <-deadline:
			t.Fatalf("%d sets delivered, want %d", len(f.delivered()), n)
		}
	}
}
