package adapters

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"berth.dev/berth/csi"
	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/sdk"
)

// Config configures a Manager.
type Config struct {
	// Adapters is the catalog (see Catalog).
	Adapters []Adapter
	// Store persists reattach records. Required.
	Store Store
	// Options are the settings every plugin manager has: Logger,
	// StartTimeout (each launch: handshake and API negotiation), restart
	// Backoff, ResetAfter and BerthVersion, with their defaults.
	pluginsup.Options
	// NodeID and NodeName are handed to every adapter
	// (sdk.StorageEnv); a CSI node plugin reports one as its node ID.
	NodeID   string
	NodeName string
	// DataDir is the client's data dir; each adapter gets
	// <DataDir>/csi/adapters/<name> as its own directory. Required.
	DataDir string
	// HealthInterval spaces the Probe calls of a healthy adapter. Default
	// 30s. An unhealthy one is probed at a fast cadence (ProbeStart,
	// doubling up to HealthInterval).
	HealthInterval time.Duration
	// ProbeStart is the first delay between probes of an adapter that is
	// not (yet) healthy. Default 25ms.
	ProbeStart time.Duration
	// ProbeTimeout is each Probe's deadline. Default: Probe's deadline in
	// the CSI call table (csi.CallProbe.Deadline, 5s).
	ProbeTimeout time.Duration
}

func (c *Config) setDefaults() {
	c.Options.SetDefaults()
	if c.HealthInterval <= 0 {
		c.HealthInterval = 30 * time.Second
	}
	if c.ProbeStart <= 0 {
		c.ProbeStart = 25 * time.Millisecond
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = csi.CallProbe.Deadline()
	}
}

// Manager runs a node's storage adapters: it launches each adapter of the
// catalog, probes it, restarts it when it dies, and reattaches to the
// processes a previous client left running. Create it with New, then
// Start it.
type Manager struct {
	cfg       Config
	logger    hclog.Logger
	sup       *pluginsup.Supervisor[*sdk.StoragePlugin, *grpc.ClientConn]
	instances map[string]*instance
	events    hub
}

// New returns a manager for cfg.Adapters. It starts nothing.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("adapters: Config.Store is required")
	}
	if cfg.DataDir == "" {
		return nil, errors.New("adapters: Config.DataDir is required")
	}
	cfg.setDefaults()
	m := &Manager{
		cfg:    cfg,
		logger: cfg.Logger,
		sup: pluginsup.New[*sdk.StoragePlugin, *grpc.ClientConn](pluginsup.Config{
			Kind: socketKind, Noun: "storage adapter", LogKey: "adapter", Options: cfg.Options,
			Records: adapterRecords{cfg.Store}, Errors: supervisorErrors,
		}),
		instances: map[string]*instance{},
	}
	for _, a := range cfg.Adapters {
		in, err := newInstance(m, a)
		if err != nil {
			return nil, fmt.Errorf("adapters: %w", err)
		}
		m.instances[a.Name] = in
	}
	return m, nil
}

// Start launches every adapter (reattaching to those a previous client
// left running) and returns once each has answered its first Probe or
// failed its first attempt. Adapters that fail keep being retried in the
// background. The error joins the *AdapterError of every adapter whose
// config is invalid, which no retry fixes; ctx's error means some adapters
// were still starting when it ended.
func (m *Manager) Start(ctx context.Context) error {
	if os.Getenv(sdk.StorageHandshake.MagicCookieKey) != "" || os.Getenv(sdk.Handshake.MagicCookieKey) != "" {
		return fmt.Errorf("storage adapters: %w", ErrNestedPlugin)
	}
	return m.sup.Start(ctx, m.loadRecords)
}

// loadRecords returns the reattach records of the catalog's adapters and
// stops the processes of those no longer in it.
func (m *Manager) loadRecords() map[string]*pluginsup.Record {
	records, err := m.cfg.Store.StorageAdapters()
	if err != nil {
		m.logger.Warn("some storage adapter reattach records are unreadable; those adapters start afresh", "error", err)
	}
	byName := map[string]*pluginsup.Record{}
	for _, r := range records {
		if _, known := m.instances[r.GetName()]; !known {
			// Its process is not ours to keep: stop it if it is there.
			m.logger.Info("stopping the adapter of a previous run that is no longer in the catalog", "adapter", r.GetName(), "pid", r.GetReattach().GetPid())
			stopStale(m, r)
			continue
		}
		byName[r.GetName()] = pluginsup.RecordFromPB(r, r.GetConfigDigest())
	}
	return byName
}

// Names returns the adapters' names, sorted.
func (m *Manager) Names() []string { return m.sup.Names() }

// Adapter returns the handle of the adapter name, or ErrUnknownAdapter.
func (m *Manager) Adapter(name string) (*Handle, error) {
	in, ok := m.instances[name]
	if !ok {
		return nil, noun.Unknown(name)
	}
	return in.handle, nil
}

// Subscribe returns every Event from now on, in order, until cancel is
// called (the channel is then closed). A slow reader loses nothing.
func (m *Manager) Subscribe() (events <-chan Event, cancel func()) { return m.events.subscribe() }

func (m *Manager) publish(ev Event) {
	ev.Time = time.Now()
	m.events.publish(ev)
}

// Shutdown stops supervising and shuts every adapter process down,
// deleting their reattach records: a client that stops on purpose leaves
// nothing running. (One that crashes leaves the processes and records,
// and the next manager reattaches.) It is safe to call more than once.
func (m *Manager) Shutdown(context.Context) error { return m.sup.Shutdown(nil) }

// abandon stops supervising without stopping the adapters and keeps their
// reattach records, as a crashed client would: tests use it to restart a
// client against live adapters.
func (m *Manager) abandon() { m.sup.Abandon() }

func (m *Manager) deleteRecord(name string) {
	if err := m.cfg.Store.DeleteStorageAdapter(name); err != nil {
		m.logger.Warn("deleting storage adapter reattach record", "adapter", name, "error", err)
	}
}
