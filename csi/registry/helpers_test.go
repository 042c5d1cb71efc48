package registry

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

const (
	controller = pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER
	node       = pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE
	monolith   = pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH
	anyType    = pb.CSIPluginType_CSI_PLUGIN_TYPE_UNSPECIFIED
)

var _ Store = (*fakeStore)(nil)

// fakeStore keeps records in a map and logs every write, one line per
// record ("put <key>", "del <key>"), in the order it was asked.
type fakeStore struct {
	mu            sync.Mutex
	recs          map[Key]*pb.CSIPluginRegistration
	ops           []string
	NextPutErr    error
	NextDeleteErr error
	ListErr       error
}

func newFakeStore() *fakeStore { return &fakeStore{recs: make(map[Key]*pb.CSIPluginRegistration)} }

func (s *fakeStore) CSIPluginRegistrations() ([]*pb.CSIPluginRegistration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.CSIPluginRegistration
	for _, r := range s.recs {
		out = append(out, proto.Clone(r).(*pb.CSIPluginRegistration))
	}
	return out, s.ListErr
}

func (s *fakeStore) PutCSIPluginRegistrations(regs ...*pb.CSIPluginRegistration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.NextPutErr; err != nil {
		s.NextPutErr = nil
		return err
	}
	for _, r := range regs {
		if r.GetType() != controller && r.GetType() != node {
			return fmt.Errorf("fake store: put of type %s", r.GetType())
		}
		s.recs[keyOf(r)] = proto.Clone(r).(*pb.CSIPluginRegistration)
		s.ops = append(s.ops, "put "+keyOf(r).String())
	}
	return nil
}

func (s *fakeStore) DeleteCSIPluginRegistrations(regs ...*pb.CSIPluginRegistration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.NextDeleteErr; err != nil {
		s.NextDeleteErr = nil
		return err
	}
	for _, r := range regs {
		delete(s.recs, keyOf(r))
		s.ops = append(s.ops, "del "+keyOf(r).String())
	}
	return nil
}

func (s *fakeStore) has(k Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.recs[k]
	return ok
}

func (s *fakeStore) opLog() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ops...)
}

var errDiskFull = errors.New("disk full")

// reg is a healthy registration of plugin in alloc with the alloc's create
// index.
func reg(typ pb.CSIPluginType, plugin, alloc string, createIndex uint64) *pb.CSIPluginRegistration {
	return &pb.CSIPluginRegistration{
		Type: typ, PluginId: plugin, AllocId: alloc,
		Endpoint: "unix:///data/csi/plugins/" + alloc + "/csi.sock",
		Provider: "hostpath.csi.berth.dev", ProviderVersion: "1.2.0",
		RegisteredAt: 1000, Healthy: true, AllocCreateIndex: createIndex,
	}
}

func mustRegister(t *testing.T, r *Registry, reg *pb.CSIPluginRegistration) {
	t.Helper()
	if err := r.Register(reg); err != nil {
		t.Fatalf("register %v: %v", reg, err)
	}
}

// keys renders the keys of entries, in their order.
func keys(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Key().String()
	}
	return out
}

func key(typ pb.CSIPluginType, plugin, alloc string) Key {
	return Key{Type: typ, PluginID: plugin, AllocID: alloc}
}

// next receives one event, failing the test if none comes within 10s (a
// bound on a hang, not a timing assumption: the event is already queued).
func next(t *testing.T, ch <-chan Event) Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("subscription closed early")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return Event{}
}

// eventLine renders an event as the fake store's log renders the write
// behind it.
func eventLine(ev Event) string {
	op := "put "
	if ev.Kind == EventDeregistered {
		op = "del "
	}
	return op + ev.Entry.Key().String()
}

// seqNow is the number of the last change.
func (r *Registry) seqNow() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.seq
}

// subscribers counts the live subscriptions.
func (r *Registry) subscribers() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.subs)
}
