package pluginmanager

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/rpc/pb"
)

// Registry is what the manager needs of the dynamic registry
// (*registry.Registry): its entries, their changes, and which alloc serves
// a plugin.
type Registry interface {
	List(typ pb.CSIPluginType) []registry.Entry
	Subscribe(ctx context.Context) <-chan registry.Event
	Serving(typ pb.CSIPluginType, pluginID string) (registry.Entry, bool)
}

var _ Registry = (*registry.Registry)(nil)

// Sender delivers the node's plugin set to the servers. It returns once
// they accepted it or with why not; the manager retries failures with
// backoff, always with the newest set. It must not hold on to set.
type Sender func(ctx context.Context, set Set) error

// Config configures a Manager.
type Config struct {
	// Registry feeds the task-launched plugins; nil for none.
	Registry Registry
	// Adapters feeds the storage adapters; nil for none.
	Adapters AdapterSource
	// Send delivers the set. Required.
	Send   Sender
	Logger hclog.Logger
	// RefreshInterval spaces the fingerprints of a healthy plugin.
	// Health changes its source reports (the supervisor through the
	// registry, the adapter manager's events) are pushed and need no
	// refresh. Default 30s.
	RefreshInterval time.Duration
	// RetryStart is the first wait before fingerprinting again a plugin
	// whose fingerprint failed or that said it is not ready; it doubles up
	// to RefreshInterval. Default 100ms.
	RetryStart time.Duration
	// FingerprintTimeout bounds one fingerprint (each call has its own
	// deadline too). Default 10s.
	FingerprintTimeout time.Duration
	// SendRetryStart and SendRetryMax space the retries of a failed send.
	// Defaults 100ms and 10s.
	SendRetryStart, SendRetryMax time.Duration
	// Now stamps updated_at; default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = 30 * time.Second
	}
	if c.RetryStart <= 0 {
		c.RetryStart = 100 * time.Millisecond
	}
	c.RetryStart = min(c.RetryStart, c.RefreshInterval)
	if c.FingerprintTimeout <= 0 {
		c.FingerprintTimeout = 10 * time.Second
	}
	if c.SendRetryStart <= 0 {
		c.SendRetryStart = 100 * time.Millisecond
	}
	if c.SendRetryMax < c.SendRetryStart {
		c.SendRetryMax = max(10*time.Second, c.SendRetryStart)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Manager keeps the node's CSI plugin set and the servers' copy of it up
// to date. Create it with New, Start it once, Stop it at shutdown.
type Manager struct {
	cfg    Config
	logger hclog.Logger

	results chan result
	out     *outbox

	// Owned by the loop goroutine.
	instances map[instKey]*instance
	gen       uint64
	last      Set
	published bool

	mu      sync.Mutex
	current Set
	// controllers are the workers of the instances the set names as each
	// plugin's controller, with what the set says of them.
	controllers map[string]controllerRef
	// nodes are the same for each plugin's node instance.
	nodes map[string]nodeRef
	// changed is closed (and replaced) whenever the set is rebuilt, so a
	// caller waiting for a node plugin (WaitNode) wakes without polling.
	changed chan struct{}

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started sync.Once
}

// New returns a manager; it does nothing until Start.
func New(cfg Config) (*Manager, error) {
	if cfg.Send == nil {
		return nil, fmt.Errorf("%w: Send is required", ErrInvalidConfig)
	}
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{
		cfg: cfg, logger: cfg.Logger, results: make(chan result), out: newOutbox(),
		instances: map[instKey]*instance{}, last: newSet(), current: newSet(), changed: make(chan struct{}),
		ctx: ctx, cancel: cancel,
	}, nil
}

// Start takes the registry's entries and the adapters as they are now,
// fingerprints each at once, and from then on follows their changes. The
// first set is sent once every plugin known at start has been
// fingerprinted (or failed to be), so a restarted client does not tell the
// servers its plugins are gone while it probes them again.
func (m *Manager) Start() {
	m.started.Do(func() {
		var regEvents <-chan registry.Event
		if m.cfg.Registry != nil {
			// Subscribed before listing: whatever changes in between is
			// in the list and queued as events, and events replace by key.
			regEvents = m.cfg.Registry.Subscribe(m.ctx)
			for _, e := range m.cfg.Registry.List(pb.CSIPluginType_CSI_PLUGIN_TYPE_UNSPECIFIED) {
				m.registered(e)
			}
		}
		var adEvents <-chan AdapterEvent
		if m.cfg.Adapters != nil {
			var cancel func()
			adEvents, cancel = m.cfg.Adapters.Subscribe()
			context.AfterFunc(m.ctx, cancel)
			for _, name := range m.cfg.Adapters.Names() {
				m.addAdapter(name)
			}
		}
		m.wg.Add(2)
		go func() {
			defer m.wg.Done()
			m.loop(regEvents, adEvents)
		}()
		go func() {
			defer m.wg.Done()
			m.sendLoop()
		}()
	})
}

// Stop ends the manager and waits for its goroutines. The servers keep the
// last set sent.
func (m *Manager) Stop() {
	m.cancel()
	m.wg.Wait()
}

// Resend asks for the current set to be sent again even if the servers
// accepted it already: the client calls it when it registered the node
// anew (the servers may have forgotten the node and its plugins).
func (m *Manager) Resend() { m.out.resend() }

// Plugins returns the set as last built (what is sent, or about to be).
func (m *Manager) Plugins() Set {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.current.Clone()
}

// loop applies every input to the instances, then builds the set and
// hands it to the sender when it changed. Inputs that are already waiting
// are applied before building, so a burst (a monolith's two entries) is
// one set.
func (m *Manager) loop(regEvents <-chan registry.Event, adEvents <-chan AdapterEvent) {
	defer func() {
		for _, in := range m.instances {
			m.stopWorker(in)
		}
	}()
	m.publish()
	for {
		select {
		case <-m.ctx.Done():
			return
		case ev, ok := <-regEvents:
			if !ok {
				regEvents = nil
				continue
			}
			m.registryEvent(ev)
		case ev := <-adEvents:
			m.adapterEvent(ev)
		case r := <-m.results:
			m.result(r)
		}
	drain:
		for range 64 {
			select {
			case ev, ok := <-regEvents:
				if !ok {
					regEvents = nil
					continue
				}
				m.registryEvent(ev)
			case ev := <-adEvents:
				m.adapterEvent(ev)
			case r := <-m.results:
				m.result(r)
			default:
				break drain
			}
		}
		m.publish()
	}
}

func (m *Manager) registryEvent(ev registry.Event) {
	switch ev.Kind {
	case registry.EventRegistered:
		m.registered(ev.Entry)
	case registry.EventDeregistered:
		m.deregistered(ev.Entry)
	}
}

// registered adds or updates a task plugin's entry.
func (m *Manager) registered(e registry.Entry) {
	r := e.Registration
	k := taskKey(r)
	// The entry may have moved from another socket of the alloc (a task
	// renamed in an update of the alloc's job): it leaves that instance.
	for ok, other := range m.instances {
		if ok != k && ok.adapter == "" && ok.pluginID == k.pluginID && ok.allocID == k.allocID {
			if _, has := other.entries[e.Key().Type]; has {
				m.dropEntry(ok, other, e.Key().Type)
			}
		}
	}
	in := m.instances[k]
	if in == nil {
		in = &instance{key: k, pluginID: r.GetPluginId(), allocID: r.GetAllocId(), source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK,
			entries: map[pb.CSIPluginType]registry.Entry{}, health: map[pb.CSIPluginType]healthMark{}}
		m.instances[k] = in
	}
	old, had := in.entries[e.Key().Type]
	in.entries[e.Key().Type] = e
	switch {
	case in.w == nil || in.endpoint != r.GetEndpoint():
		// New: connect.
		m.stopWorker(in)
		in.endpoint = r.GetEndpoint()
		in.attempted, in.fp, in.fpErr = false, nil, nil
		endpoint, logger := in.endpoint, m.logger.With("plugin_id", in.pluginID, "alloc_id", in.allocID)
		m.startWorker(in, func() (*csi.Client, error) { return csi.Dial(endpoint, csi.WithLogger(logger)) })
		m.logger.Debug("csi plugin instance added", "plugin_id", in.pluginID, "alloc_id", in.allocID, "endpoint", endpoint)
	case r.GetHealthy() || e.NeedsProbe:
		// Healthy again, registered again (a task restart), or restored:
		// what the plugin serves may have changed, so look now.
		if !had || e.NeedsProbe || !old.Registration.GetHealthy() || old.Registration.GetRegisteredAt() != r.GetRegisteredAt() {
			in.w.poke()
		}
	}
}

// deregistered removes a task plugin's entry, and the instance with its
// last one.
func (m *Manager) deregistered(e registry.Entry) {
	k := taskKey(e.Registration)
	in := m.instances[k]
	if in == nil {
		return
	}
	m.dropEntry(k, in, e.Key().Type)
}

// dropEntry removes one side's entry from a task plugin's instance, and the
// instance with its last entry.
func (m *Manager) dropEntry(k instKey, in *instance, typ pb.CSIPluginType) {
	delete(in.entries, typ)
	delete(in.health, typ)
	if len(in.entries) == 0 {
		m.stopWorker(in)
		delete(m.instances, k)
		m.logger.Debug("csi plugin instance removed", "plugin_id", in.pluginID, "alloc_id", in.allocID)
	}
}

func (m *Manager) addAdapter(name string) {
	k := instKey{adapter: name}
	in := &instance{key: k, pluginID: name, source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER, health: map[pb.CSIPluginType]healthMark{}}
	st, err := m.cfg.Adapters.State(name)
	if err != nil {
		st.Reason = err.Error()
	}
	in.srcHealthy, in.srcReason = st.Healthy, st.Reason
	if !st.Running {
		// Its worker waits for a process that may be long in coming (a
		// missing executable retried with backoff): the first set does
		// not wait for it. Unfingerprinted, it is not reported until it
		// runs.
		in.attempted = true
	}
	m.instances[k] = in
	src, logger := m.cfg.Adapters, m.logger.With("adapter", name)
	m.startWorker(in, func() (*csi.Client, error) {
		conn, err := src.Conn(name)
		if err != nil {
			return nil, err
		}
		return csi.New(conn, csi.WithLogger(logger)), nil
	})
}

// adapterEvent follows an adapter's health as its manager reports it.
func (m *Manager) adapterEvent(ev AdapterEvent) {
	in := m.instances[instKey{adapter: ev.Adapter}]
	if in == nil {
		return
	}
	switch ev.Kind {
	case AdapterHealthy:
		in.srcHealthy, in.srcReason = true, ""
		in.w.poke()
	case AdapterUnhealthy, AdapterExited, AdapterStartFailed:
		in.srcHealthy, in.srcReason = false, ev.Kind.String()+": "+ev.Reason
		if ev.Reason == "" {
			in.srcReason = ev.Kind.String()
		}
	case AdapterStarted, AdapterReattached:
		// A new process: it may serve something else.
		in.w.poke()
	}
}

func (m *Manager) result(r result) {
	in := m.instances[r.key]
	if in == nil || in.w == nil || in.w.gen != r.gen {
		return // from a worker replaced or stopped since
	}
	if r.err != nil && (in.fpErr == nil || !in.attempted) {
		m.logger.Warn("csi plugin fingerprint failed", "plugin", r.key.String(), "error", r.err)
	}
	in.attempted = true
	in.fpErr = r.err
	if r.err == nil {
		in.fp = r.fp
	}
}

// publish builds the set and queues it for the servers when it changed.
// Nothing is published until every instance has had its first
// fingerprint, or while the registry is ahead of the events applied.
func (m *Manager) publish() {
	if !m.published {
		for _, in := range m.instances {
			if !in.attempted {
				return
			}
		}
	}
	set, ctrl, nodes, ok := m.build()
	if !ok {
		return
	}
	// The serving instance may change with nothing the servers see
	// changing (a new alloc's plugin fingerprinting the same): kept
	// current whether or not the set is sent.
	m.mu.Lock()
	m.controllers, m.nodes = ctrl, nodes
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
	if m.published && set.Equal(m.last) {
		return
	}
	m.published = true
	m.last = set
	m.mu.Lock()
	m.current = set
	m.mu.Unlock()
	m.out.offer(set.Clone())
}

// build is the node's set from the instances: per plugin and side the
// task instance the registry says serves it (the newest healthy alloc),
// else an adapter. ok is false when the registry names an entry whose
// event is still queued; that event builds again.
func (m *Manager) build() (Set, map[string]controllerRef, map[string]nodeRef, bool) {
	now := m.cfg.Now()
	set := newSet()
	ctrl := map[string]controllerRef{}
	nodes := map[string]nodeRef{}
	keys := slices.SortedFunc(maps.Keys(m.instances), func(a, b instKey) int {
		if a.pluginID != b.pluginID {
			return cmpStr(a.pluginID, b.pluginID)
		}
		return cmpStr(a.allocID, b.allocID)
	})
	type plugSide struct {
		id   string
		side pb.CSIPluginType
	}
	done := map[plugSide]bool{}
	for _, k := range keys {
		in := m.instances[k]
		if in.source != pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK {
			continue
		}
		for _, side := range sides {
			ps := plugSide{in.pluginID, side}
			if _, has := in.entries[side]; !has || done[ps] {
				continue
			}
			done[ps] = true
			e, ok := m.cfg.Registry.Serving(side, in.pluginID)
			if !ok {
				return Set{}, nil, nil, false
			}
			serving := m.instances[taskKey(e.Registration)]
			if serving == nil {
				return Set{}, nil, nil, false
			}
			if _, has := serving.entries[side]; !has {
				return Set{}, nil, nil, false
			}
			if !serving.attempted {
				// A new alloc of the plugin not fingerprinted yet: what was
				// reported stays for the few milliseconds that takes, and
				// so does the instance that serves it (a storage adapter
				// being replaced, an older alloc): the servers' calls,
				// picked on what was reported, must still find it.
				if prev := m.last.side(side)[in.pluginID]; prev != nil {
					set.side(side)[in.pluginID] = prev
					if ref, ok := m.controllers[in.pluginID]; ok && side == pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER {
						ctrl[in.pluginID] = ref
					}
					if ref, ok := m.nodes[in.pluginID]; ok && side == pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE {
						nodes[in.pluginID] = ref
					}
				}
				continue
			}
			set.side(side)[in.pluginID] = serving.info(side, now)
			if side == pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER {
				ctrl[in.pluginID] = controllerRef{w: serving.w, info: set.side(side)[in.pluginID]}
			} else {
				nodes[in.pluginID] = serving.nodeRef(set.side(side)[in.pluginID])
			}
		}
	}
	for _, k := range keys {
		in := m.instances[k]
		if in.source != pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER {
			continue
		}
		// A task-launched plugin of the adapter's ID replaces the adapter
		// on this node, on both sides, healthy or not, for as long as an
		// alloc of it is registered: the two are different backends, a
		// volume of one is unknown to the other, so the node never mixes
		// them (one's controller, the other's node) nor falls back from
		// one to the other.
		replaced := slices.ContainsFunc(keys, func(t instKey) bool { return t.adapter == "" && t.pluginID == in.pluginID })
		if replaced != in.replaced {
			in.replaced = replaced
			if replaced {
				m.logger.Warn("a task-launched csi plugin of the storage adapter's ID serves it on this node; the adapter is not reported until no alloc of the plugin is registered",
					"plugin_id", in.pluginID)
			} else {
				m.logger.Info("the storage adapter serves its plugin ID on this node again", "plugin_id", in.pluginID)
			}
		}
		if replaced {
			continue
		}
		for _, side := range in.adapterSides() {
			info := in.info(side, now)
			set.side(side)[in.pluginID] = info
			if side == pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER {
				ctrl[in.pluginID] = controllerRef{w: in.w, info: info}
			} else {
				nodes[in.pluginID] = in.nodeRef(info)
			}
		}
	}
	return set, ctrl, nodes, true
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
