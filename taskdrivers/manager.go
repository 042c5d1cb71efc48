package taskdrivers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// Config configures a Manager.
type Config struct {
	// Plugins is the catalog (see Catalog).
	Plugins []Plugin
	// Store persists reattach configs and task handles. Required.
	Store Store
	// Options are the settings every plugin manager has: Logger,
	// StartTimeout (each launch of a plugin: handshake, API negotiation,
	// configuration and task recovery), restart Backoff, ResetAfter and
	// BerthVersion, with their defaults.
	pluginsup.Options
	// StopTasksOnShutdown makes Shutdown stop and destroy every task with
	// a persisted handle before it stops the plugins. A dev agent, whose
	// data dir (and with it the handles) is deleted at exit, sets it; a
	// real agent leaves its tasks running for the next start to recover.
	StopTasksOnShutdown bool
	// StopTimeout is how long each task gets between SIGTERM and SIGKILL
	// when StopTasksOnShutdown. Default 10s.
	StopTimeout time.Duration
	// CleanupTimeout bounds the DestroyTask that cleans up after a
	// StartTask that failed once the plugin may have started the task (its
	// caller gave up, or its handle could not be persisted), so a plugin
	// that hangs cannot hang StartTask. Default 30s.
	CleanupTimeout time.Duration
}

func (c *Config) setDefaults() {
	c.Options.SetDefaults()
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.CleanupTimeout <= 0 {
		c.CleanupTimeout = 30 * time.Second
	}
}

// Manager runs a node's task driver plugins: it launches each plugin of the
// catalog, configures it, keeps its fingerprint, restarts it when it dies
// and recovers its tasks. Create it with New, then Start it.
type Manager struct {
	cfg       Config
	logger    hclog.Logger
	sup       *pluginsup.Supervisor[*sdk.DriverPlugin, *live]
	instances map[string]*instance
	changed   chan struct{}
	// observe, when set (by tests, before Start), sees every DriverInfo
	// change in order.
	observe func(*pb.DriverInfo)

	mu sync.Mutex
	// starting holds the IDs of tasks being started, so that two drivers
	// cannot start tasks with one ID before either handle is persisted.
	starting map[string]bool
	// startsDone is closed when starting empties; nil while it is empty.
	// Shutdown waits on it so it sees every handle a start persists.
	startsDone chan struct{}
	// destroyNext holds the tasks whose plugin died inside StartTask, for
	// the driver's next plugin to destroy (destroynext.go).
	destroyNext map[string]destroyNext
}

// New returns a manager for cfg.Plugins. It starts nothing.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("taskdrivers: Config.Store is required")
	}
	cfg.setDefaults()
	m := &Manager{
		cfg:    cfg,
		logger: cfg.Logger,
		sup: pluginsup.New[*sdk.DriverPlugin, *live](pluginsup.Config{
			Kind: "driver", Noun: "driver plugin", LogKey: "driver", Options: cfg.Options,
			Records: pluginRecords{cfg.Store}, Errors: supervisorErrors,
		}),
		instances: map[string]*instance{},
		changed:   make(chan struct{}, 1),
	}
	for _, p := range cfg.Plugins {
		in, err := newInstance(m, p)
		if err != nil {
			return nil, fmt.Errorf("taskdrivers: %w", err)
		}
		m.instances[p.Name] = in
	}
	return m, nil
}

// Start launches every plugin and returns once each has either reported
// its first fingerprint or failed its first attempt, so DriverInfos is
// complete. Plugins that fail keep being retried in the background. The
// error joins the *PluginError of every driver whose plugin config is
// invalid (sdk.ErrInvalidConfig, sdk.ErrConfigJSON), which no retry fixes;
// ctx's error means some plugins were still starting when it ended.
func (m *Manager) Start(ctx context.Context) error {
	if os.Getenv(sdk.Handshake.MagicCookieKey) != "" {
		return fmt.Errorf("drivers: %w", ErrNestedPlugin)
	}
	return m.sup.Start(ctx, m.loadRecords)
}

// loadRecords returns the reattach records of the catalog's drivers and
// forgets those of drivers no longer in it.
func (m *Manager) loadRecords() map[string]*pluginsup.Record {
	records, err := m.cfg.Store.DriverPlugins()
	if err != nil {
		m.logger.Warn("some driver plugin reattach records are unreadable; those plugins start afresh", "error", err)
	}
	byName := map[string]*pluginsup.Record{}
	for _, r := range records {
		if _, known := m.instances[r.GetName()]; !known {
			m.logger.Info("forgetting reattach record of a driver no longer in the catalog", "driver", r.GetName(), "pid", r.GetReattach().GetPid())
			m.deleteRecord(r.GetName())
			continue
		}
		byName[r.GetName()] = pluginsup.RecordFromPB(r, "")
	}
	m.warnOrphanHandles()
	return byName
}

// reserve claims a task ID for a StartTask until the returned func is
// called; an ID in use by a persisted task or another start is
// sdk.ErrTaskExists.
func (m *Manager) reserve(id string) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Checked under mu, so no start begins once Shutdown has looked for
	// starts under way.
	if m.sup.Stopping() {
		return nil, fmt.Errorf("driver manager: %w", ErrShutdown)
	}
	if m.starting[id] {
		return nil, fmt.Errorf("%w: another start of it is under way", sdk.ErrTaskExists)
	}
	if p, ok := m.destroyNext[id]; ok {
		return nil, fmt.Errorf("%w: driver %q's plugin died starting it, and its next plugin has yet to destroy it", sdk.ErrTaskExists, p.in.p.Name)
	}
	rec, ok, err := m.cfg.Store.TaskHandle(id)
	if err != nil {
		return nil, fmt.Errorf("reading task handles: %w", err)
	}
	if ok {
		return nil, fmt.Errorf("%w: started by driver %q", sdk.ErrTaskExists, rec.GetDriver())
	}
	if m.starting == nil {
		m.starting = map[string]bool{}
	}
	if len(m.starting) == 0 {
		m.startsDone = make(chan struct{})
	}
	m.starting[id] = true
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.starting, id)
		if len(m.starting) == 0 {
			close(m.startsDone)
			m.startsDone = nil
		}
	}, nil
}

// warnOrphanHandles logs persisted tasks whose driver is not in the catalog.
func (m *Manager) warnOrphanHandles() {
	handles, err := m.cfg.Store.TaskHandles()
	if err != nil {
		m.logger.Error("some task handles are unreadable; their tasks cannot be recovered", "error", err)
	}
	for _, h := range handles {
		if _, known := m.instances[h.GetDriver()]; !known {
			m.logger.Warn("task handle of a driver that is not in the catalog; its task cannot be recovered until the driver is back",
				"driver", h.GetDriver(), "task_id", h.GetHandle().GetConfig().GetId())
		}
	}
}

// DriverInfos returns every driver's fingerprint for the node, by name.
// The client calls it to register the node.
func (m *Manager) DriverInfos() map[string]*pb.DriverInfo {
	out := make(map[string]*pb.DriverInfo, len(m.instances))
	for name, in := range m.instances {
		out[name] = in.driverInfo()
	}
	return out
}

// Changed receives a value after DriverInfos changed (coalesced: one value
// may stand for several changes). The client re-registers the node on it.
func (m *Manager) Changed() <-chan struct{} { return m.changed }

func (m *Manager) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Driver returns the driver name for running tasks, or ErrUnknownDriver.
func (m *Manager) Driver(name string) (*Driver, error) {
	in, ok := m.instances[name]
	if !ok {
		return nil, noun.Unknown(name)
	}
	return &Driver{in: in}, nil
}

// Shutdown stops the manager. It refuses new StartTask calls and waits for
// those under way, so their handles are persisted (or their tasks
// destroyed) before it goes on; with StopTasksOnShutdown it then stops and
// destroys every persisted task. Last it stops supervising and shuts down
// every plugin process it runs (their tasks keep running under their
// executors, and their handles stay in the store for the next start to
// recover). ctx bounds the wait for starts and the task stops; the plugins
// are stopped regardless. It is safe to call more than once.
func (m *Manager) Shutdown(ctx context.Context) error {
	return m.sup.Shutdown(func(started bool) error {
		m.mu.Lock()
		startsDone := m.startsDone
		m.mu.Unlock()
		var errs []error
		if startsDone != nil {
			select {
			case <-startsDone:
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("waiting for task starts under way: %w", ctx.Err()))
			}
		}
		if started && m.cfg.StopTasksOnShutdown {
			errs = append(errs, m.stopAllTasks(ctx))
		}
		return errors.Join(errs...)
	})
}

// abandon stops supervising without stopping the plugins and keeps their
// reattach records, as a crashed client would: tests use it to restart a
// client against live plugins.
func (m *Manager) abandon() { m.sup.Abandon() }

// isStopping reports whether Shutdown has begun; StartTask is then refused.
func (m *Manager) isStopping() bool { return m.sup.Stopping() }

// stopAllTasks stops and destroys every task with a persisted handle.
func (m *Manager) stopAllTasks(ctx context.Context) error {
	handles, err := m.cfg.Store.TaskHandles()
	errs := []error{err}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range handles {
		in, ok := m.instances[h.GetDriver()]
		if !ok {
			continue
		}
		id := h.GetHandle().GetConfig().GetId()
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &Driver{in: in}
			err := d.StopTask(ctx, id, m.cfg.StopTimeout, "")
			if err == nil || errors.Is(err, sdk.ErrTaskNotFound) {
				err = d.DestroyTask(ctx, id, true)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("stopping task %q of driver %q: %w", id, in.p.Name, err))
				mu.Unlock()
				return
			}
			in.logger.Info("task stopped at shutdown", "task_id", id)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (m *Manager) deleteRecord(name string) {
	if err := m.cfg.Store.DeleteDriverPlugin(name); err != nil {
		m.logger.Warn("deleting driver plugin reattach record", "driver", name, "error", err)
	}
}

// cloneInfo copies a DriverInfo for a caller.
func cloneInfo(i *pb.DriverInfo) *pb.DriverInfo { return proto.Clone(i).(*pb.DriverInfo) }
