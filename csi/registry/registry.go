package registry

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

var (
	// ErrInvalidRegistration is returned by Register for a registration
	// missing its plugin ID, alloc ID or endpoint, or with no valid type.
	ErrInvalidRegistration = errcode.New(codes.InvalidArgument, "invalid csi plugin registration")
	// ErrNotRegistered is returned by SetHealth when the alloc has no entry
	// for the plugin.
	ErrNotRegistered = errcode.New(codes.NotFound, "csi plugin not registered")
)

// Store persists the registry's entries; host/client/state's DB is one.
// Each call is one atomic write, durable when it returns.
type Store interface {
	// CSIPluginRegistrations returns every stored entry; records that could
	// not be read are reported in the error next to the good ones.
	CSIPluginRegistrations() ([]*pb.CSIPluginRegistration, error)
	// PutCSIPluginRegistrations stores or replaces entries, keyed by type,
	// plugin ID and alloc ID.
	PutCSIPluginRegistrations(regs ...*pb.CSIPluginRegistration) error
	// DeleteCSIPluginRegistrations removes the entries with the key fields
	// of regs; a missing one is not an error.
	DeleteCSIPluginRegistrations(regs ...*pb.CSIPluginRegistration) error
}

// Key names one entry: a plugin instance of one type in one alloc.
type Key struct {
	Type     pb.CSIPluginType // controller or node
	PluginID string
	AllocID  string
}

// String renders the key for errors and logs.
func (k Key) String() string {
	return fmt.Sprintf("%s plugin %q of alloc %s", typeName(k.Type), k.PluginID, k.AllocID)
}

// Entry is one registered plugin instance.
type Entry struct {
	// Registration is the entry as stored; its Type is controller or node,
	// never monolith. Each Entry handed out holds its own copy.
	Registration *pb.CSIPluginRegistration
	// NeedsProbe is set on an entry restored from the store after a client
	// restart: its health is what it was before the restart, so it must be
	// probed again. Register and SetHealth clear it.
	NeedsProbe bool
}

// Key returns the entry's key.
func (e Entry) Key() Key { return keyOf(e.Registration) }

func keyOf(r *pb.CSIPluginRegistration) Key {
	return Key{Type: r.GetType(), PluginID: r.GetPluginId(), AllocID: r.GetAllocId()}
}

func (e Entry) clone() Entry {
	return Entry{Registration: proto.Clone(e.Registration).(*pb.CSIPluginRegistration), NeedsProbe: e.NeedsProbe}
}

// entry is an Entry with the order it was registered in, the last
// tiebreak between two allocs of one plugin.
type entry struct {
	Entry
	seq uint64
}

// newer reports whether a is a newer instance than b of the same plugin:
// a newer alloc (create index), then a later registration.
func newer(a, b *entry) bool {
	if c := compareAge(a.Registration, b.Registration); c != 0 {
		return c > 0
	}
	return a.seq > b.seq
}

// compareAge orders two registrations of one plugin by what is persisted:
// the alloc's create index, then the registration time.
func compareAge(a, b *pb.CSIPluginRegistration) int {
	return cmp.Or(cmp.Compare(a.GetAllocCreateIndex(), b.GetAllocCreateIndex()), cmp.Compare(a.GetRegisteredAt(), b.GetRegisteredAt()))
}

// Option configures a Registry.
type Option func(*Registry)

// WithLogger sets the logger (default: none).
func WithLogger(l hclog.Logger) Option { return func(r *Registry) { r.logger = l } }

// WithClock sets the clock that stamps registered_at when a registration
// leaves it zero (default time.Now).
func WithClock(now func() time.Time) Option { return func(r *Registry) { r.now = now } }

// Registry is a node's dynamic CSI plugin registry. It is safe for
// concurrent use.
type Registry struct {
	store  Store
	logger hclog.Logger
	now    func() time.Time

	// mu is held across the store write of a change, so changes reach the
	// store, the entries and the subscribers' queues in one order.
	mu      sync.RWMutex
	entries map[Key]*entry
	// seq counts changes; every event carries the number of its change.
	seq  uint64
	subs map[*subscriber]struct{}
}

// New returns an empty registry that persists to store. Call Restore before
// the client's tasks run to take back what a previous run registered.
func New(store Store, opts ...Option) *Registry {
	r := &Registry{
		store:   store,
		logger:  hclog.NewNullLogger(),
		now:     time.Now,
		entries: make(map[Key]*entry),
		subs:    make(map[*subscriber]struct{}),
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// split validates reg and returns its entries: one, or two for a monolith.
func (r *Registry) split(reg *pb.CSIPluginRegistration) ([]*pb.CSIPluginRegistration, error) {
	if reg.GetPluginId() == "" || reg.GetAllocId() == "" || strings.Contains(reg.GetAllocId(), "/") || reg.GetEndpoint() == "" {
		return nil, fmt.Errorf("%w: plugin %q of alloc %q, endpoint %q: need a plugin id, an alloc id without '/' and an endpoint",
			ErrInvalidRegistration, reg.GetPluginId(), reg.GetAllocId(), reg.GetEndpoint())
	}
	var types []pb.CSIPluginType
	switch reg.GetType() {
	case pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER, pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE:
		types = []pb.CSIPluginType{reg.GetType()}
	case pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH:
		types = []pb.CSIPluginType{pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER, pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE}
	default:
		return nil, fmt.Errorf("%w: plugin %q of alloc %s has type %s, want controller, node or monolith",
			ErrInvalidRegistration, reg.GetPluginId(), reg.GetAllocId(), reg.GetType())
	}
	registeredAt := reg.GetRegisteredAt()
	if registeredAt == 0 {
		registeredAt = r.now().UnixNano()
	}
	out := make([]*pb.CSIPluginRegistration, len(types))
	for i, t := range types {
		c := proto.Clone(reg).(*pb.CSIPluginRegistration)
		c.Type, c.RegisteredAt = t, registeredAt
		out[i] = c
	}
	return out, nil
}

// Register adds a healthy (or, on a later call, updated) plugin instance:
// a controller or node entry, or both for a monolith, stored in one write.
// An entry with the same type, plugin ID and alloc ID is replaced. The
// change is in the store before List, Serving or a subscriber sees it; if
// the store refuses it, nothing changes. A zero registered_at is stamped
// with the registry's clock.
func (r *Registry) Register(reg *pb.CSIPluginRegistration) error {
	regs, err := r.split(reg)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.store.PutCSIPluginRegistrations(regs...); err != nil {
		return fmt.Errorf("csi registry: register %s plugin %q of alloc %s: %w",
			typeName(reg.GetType()), reg.GetPluginId(), reg.GetAllocId(), err)
	}
	for _, c := range regs {
		r.put(Entry{Registration: c})
	}
	return nil
}

// SetHealth records a health check of the alloc's instance of the plugin:
// each of its entries (both of a monolith) takes healthy and description
// and no longer needs a probe. Entries that change are stored and sent to
// subscribers as EventRegistered; an unchanged one is left alone.
func (r *Registry) SetHealth(allocID, pluginID string, healthy bool, description string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found bool
	var changed []Entry
	for _, t := range []pb.CSIPluginType{pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER, pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE} {
		e, ok := r.entries[Key{Type: t, PluginID: pluginID, AllocID: allocID}]
		if !ok {
			continue
		}
		found = true
		if !e.NeedsProbe && e.Registration.GetHealthy() == healthy && e.Registration.GetHealthDescription() == description {
			continue
		}
		c := proto.Clone(e.Registration).(*pb.CSIPluginRegistration)
		c.Healthy, c.HealthDescription = healthy, description
		changed = append(changed, Entry{Registration: c})
	}
	if !found {
		return fmt.Errorf("csi registry: set health of plugin %q of alloc %s: %w", pluginID, allocID, ErrNotRegistered)
	}
	if len(changed) == 0 {
		return nil
	}
	regs := make([]*pb.CSIPluginRegistration, len(changed))
	for i, e := range changed {
		regs[i] = e.Registration
	}
	if err := r.store.PutCSIPluginRegistrations(regs...); err != nil {
		return fmt.Errorf("csi registry: set health of plugin %q of alloc %s: %w", pluginID, allocID, err)
	}
	for _, e := range changed {
		r.put(e)
	}
	return nil
}

// Deregister removes the alloc's entries for the plugin (both of a
// monolith): its task stopped, for good or for a restart. Removing nothing
// is not an error, so a stop hook may run twice.
func (r *Registry) Deregister(allocID, pluginID string) error {
	return r.remove(fmt.Sprintf("plugin %q of alloc %s", pluginID, allocID), func(k Key) bool {
		return k.AllocID == allocID && k.PluginID == pluginID
	})
}

// DeregisterAlloc removes every entry of the alloc, of every plugin.
func (r *Registry) DeregisterAlloc(allocID string) error {
	return r.remove("alloc "+allocID, func(k Key) bool { return k.AllocID == allocID })
}

// remove deletes the entries whose keys match, store first.
func (r *Registry) remove(what string, match func(Key) bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gone []*entry
	for k, e := range r.entries {
		if match(k) {
			gone = append(gone, e)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	slices.SortFunc(gone, func(a, b *entry) int { return compareKeys(a.Key(), b.Key()) })
	regs := make([]*pb.CSIPluginRegistration, len(gone))
	for i, e := range gone {
		regs[i] = e.Registration
	}
	if err := r.store.DeleteCSIPluginRegistrations(regs...); err != nil {
		return fmt.Errorf("csi registry: deregister %s: %w", what, err)
	}
	for _, e := range gone {
		r.delete(e)
	}
	return nil
}

// put makes e visible and tells the subscribers; r.mu is held and e is in
// the store.
func (r *Registry) put(e Entry) {
	r.seq++
	k := e.Key()
	r.entries[k] = &entry{Entry: e, seq: r.seq}
	r.logger.Debug("csi plugin registered", "type", typeName(k.Type), "plugin_id", k.PluginID, "alloc_id", k.AllocID,
		"healthy", e.Registration.GetHealthy(), "needs_probe", e.NeedsProbe)
	r.publish(Event{Seq: r.seq, Kind: EventRegistered, Entry: e})
}

// delete removes e and tells the subscribers; r.mu is held and e is gone
// from the store.
func (r *Registry) delete(e *entry) {
	r.seq++
	k := e.Key()
	delete(r.entries, k)
	r.logger.Debug("csi plugin deregistered", "type", typeName(k.Type), "plugin_id", k.PluginID, "alloc_id", k.AllocID)
	r.publish(Event{Seq: r.seq, Kind: EventDeregistered, Entry: e.Entry})
}

// List returns the entries of type typ (controller or node; any other value
// lists both), sorted by plugin ID with the serving instance of each plugin
// first and the others newest first.
func (r *Registry) List(typ pb.CSIPluginType) []Entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.listLocked(typ)
}

// listLocked is List with r.mu held.
func (r *Registry) listLocked(typ pb.CSIPluginType) []Entry {
	all := typ != pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER && typ != pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE
	var es []*entry
	for k, e := range r.entries {
		if all || k.Type == typ {
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b *entry) int {
		ka, kb := a.Key(), b.Key()
		if c := cmp.Or(cmp.Compare(ka.Type, kb.Type), strings.Compare(ka.PluginID, kb.PluginID)); c != 0 {
			return c
		}
		switch {
		case serves(a, b):
			return -1
		case serves(b, a):
			return 1
		}
		return 0
	})
	out := make([]Entry, len(es))
	for i, e := range es {
		out[i] = e.clone()
	}
	return out
}

// serves reports whether a is preferred over b to serve their plugin: an
// instance known healthy, then one restored healthy but not probed again
// since the client restarted (its health is from before; its task may be
// gone), then an unhealthy one; among equals the newer.
func serves(a, b *entry) bool {
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra > rb
	}
	return newer(a, b)
}

func rank(e *entry) int {
	switch {
	case !e.Registration.GetHealthy():
		return 0
	case e.NeedsProbe:
		return 1
	}
	return 2
}

// Serving returns the instance that serves plugin pluginID as type typ on
// this node: the newest healthy entry (one confirmed since the client
// started before one restored), or, when none is healthy, the newest
// one, so that a plugin whose every instance is unhealthy is reported
// unhealthy rather than missing. ok is false when the plugin has no entry.
func (r *Registry) Serving(typ pb.CSIPluginType, pluginID string) (e Entry, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var best *entry
	for k, cand := range r.entries {
		if k.Type == typ && k.PluginID == pluginID && (best == nil || serves(cand, best)) {
			best = cand
		}
	}
	if best == nil {
		return Entry{}, false
	}
	return best.clone(), true
}

func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Type, b.Type), strings.Compare(a.PluginID, b.PluginID), strings.Compare(a.AllocID, b.AllocID))
}

func typeName(t pb.CSIPluginType) string {
	switch t {
	case pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER:
		return "controller"
	case pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE:
		return "node"
	case pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH:
		return "monolith"
	}
	return t.String()
}
