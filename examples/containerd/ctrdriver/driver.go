package ctrdriver

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// Health probe cadence: how often the socket is asked while healthy and
// while not, and how long one probe may take.
const (
	probeHealthy   = 15 * time.Second
	probeUnhealthy = 3 * time.Second
	probeTimeout   = 5 * time.Second
)

// Driver is the containerd driver. Create it with New.
type Driver struct {
	logger hclog.Logger
	tasks  sdk.TaskStore[*task]
	events sdk.EventHub
	fp     *sdk.FingerprintHub

	archives archiveLoads

	// sharedMu orders EnsureShared and ReleaseShared across tasks, and
	// guards the counts of the shared mount points' users (tasks running
	// or starting) and which of them berth made shared.
	sharedMu    sync.Mutex
	sharedUsers map[string]int
	sharedMade  map[string]bool

	mu          sync.Mutex
	cfg         pluginConfig
	client      *client.Client // nil until SetConfig
	gen         uint64         // SetConfig's count: which config a probe's fingerprint is of
	holders     map[*client.Client]int
	stopProbing context.CancelFunc
	starting    map[string]bool // task IDs whose StartTask is in progress
}

var (
	_ sdk.Driver      = (*Driver)(nil)
	_ sdk.StatsDriver = (*Driver)(nil)
)

// New returns a containerd driver; it connects when SetConfig gives it an
// address.
func New(logger hclog.Logger) *Driver {
	return &Driver{
		logger:      logger,
		holders:     map[*client.Client]int{},
		sharedUsers: map[string]int{}, sharedMade: map[string]bool{},
		fp: sdk.NewFingerprintHub(&driverpb.DriverFingerprint{
			Health:            driverpb.Health_HEALTH_UNHEALTHY,
			HealthDescription: "not configured yet",
		}),
	}
}

// PluginInfo implements sdk.Driver.
func (d *Driver) PluginInfo(context.Context) (*driverpb.PluginInfo, error) {
	return &driverpb.PluginInfo{Name: Name, Version: Version}, nil
}

// Capabilities implements sdk.Driver.
func (d *Driver) Capabilities(context.Context) (*driverpb.DriverCapabilities, error) {
	return &driverpb.DriverCapabilities{
		SendSignals: true, Stats: true, MountVolumes: true,
		FsIsolation: driverpb.FSIsolation_FS_ISOLATION_IMAGE,
	}, nil
}

// ConfigSchema implements sdk.Driver.
func (d *Driver) ConfigSchema(context.Context) (*driverpb.ConfigSchemas, error) {
	return &driverpb.ConfigSchemas{Plugin: pluginSchema, Task: taskSchema}, nil
}

// SetConfig implements sdk.Driver: it connects to containerd at address
// (the connection is lazy: an absent socket is a health problem, not a
// config error), probes it once so the first fingerprint after SetConfig
// is the real one, and keeps probing.
func (d *Driver) SetConfig(ctx context.Context, cfg *driverpb.PluginConfig) error {
	pc, err := parsePluginConfig(cfg)
	if err != nil {
		return err
	}
	c, err := newClient(pc)
	if err != nil {
		return &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopePlugin, Key: "address", Problem: fmt.Sprintf("containerd client for %q: %v", pc.address, err)}
	}
	probeCtx, stop := context.WithCancel(context.Background())
	d.mu.Lock()
	old, oldStop := d.client, d.stopProbing
	d.cfg, d.client, d.stopProbing = pc, c, stop
	d.gen++
	gen := d.gen
	d.mu.Unlock()
	if oldStop != nil {
		oldStop()
	}
	if old != nil {
		d.logger.Debug("containerd config replaced", "address", pc.address)
		d.mu.Lock()
		unused := d.holders[old] == 0
		d.mu.Unlock()
		if unused {
			old.Close()
		}
	}
	healthy := d.probe(ctx, gen, c, pc)
	go d.probeLoop(probeCtx, gen, c, pc, healthy)
	return nil
}

// hold returns the client and config in use, counting one more holder
// of the client until release: a start or recovery in progress, or a
// task (which holds the client it was started or recovered through until
// it is destroyed). A client a SetConfig replaced is closed when its
// last holder lets go.
func (d *Driver) hold() (*client.Client, pluginConfig, func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.client
	if c == nil {
		return nil, d.cfg, func() {}
	}
	d.holders[c]++
	var once sync.Once
	return c, d.cfg, func() { once.Do(func() { d.unhold(c) }) }
}

// holdAgain counts one more holder of c, which the caller holds already.
func (d *Driver) holdAgain(c *client.Client) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.holders[c]++
	var once sync.Once
	return func() { once.Do(func() { d.unhold(c) }) }
}

func (d *Driver) unhold(c *client.Client) {
	d.mu.Lock()
	d.holders[c]--
	closeIt := d.holders[c] <= 0 && c != d.client
	if d.holders[c] <= 0 {
		delete(d.holders, c)
	}
	d.mu.Unlock()
	if closeIt {
		if err := c.Close(); err != nil {
			d.logger.Debug("closing a replaced containerd client", "error", err)
		}
	}
}

// setFingerprint publishes fp when it comes from the probe of the
// current config (generation gen): a probe of a replaced config that
// ends late must not overwrite the new config's health.
func (d *Driver) setFingerprint(gen uint64, fp *driverpb.DriverFingerprint) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if gen != d.gen {
		return false
	}
	d.fp.Set(fp)
	return true
}

// newClient connects to pc's containerd (lazily: a dial error shows on
// the first call), its content reads of manifests and configs through a
// blobCache.
func newClient(pc pluginConfig) (*client.Client, error) {
	opts := []client.Opt{client.WithDefaultNamespace(pc.namespace), client.WithDefaultRuntime(pc.runtime)}
	base, err := client.New(pc.address, opts...)
	if err != nil {
		return nil, err
	}
	conn, ok := base.Conn().(*grpc.ClientConn)
	if !ok {
		base.Close()
		return nil, fmt.Errorf("containerd client has no gRPC connection (%T)", base.Conn())
	}
	// The same connection, the content store's small blobs cached.
	return client.NewWithConn(conn, append(opts, client.WithServices(client.WithContentStore(newBlobCache(base.ContentStore()))))...)
}

// probe asks containerd for its version and the snapshotter's state and
// sets the fingerprint; it reports whether containerd is healthy.
func (d *Driver) probe(ctx context.Context, gen uint64, c *client.Client, pc pluginConfig) bool {
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(ctx, pc.namespace), probeTimeout)
	defer cancel()
	unhealthy := func(why string) bool {
		d.setFingerprint(gen, &driverpb.DriverFingerprint{Health: driverpb.Health_HEALTH_UNHEALTHY, HealthDescription: why})
		return false
	}
	// A socket that is not there says so at once, in plain words; the
	// client would wait out the probe's timeout for it.
	if path, ok := strings.CutPrefix(pc.address, "unix://"); ok || !strings.Contains(pc.address, "://") {
		if !ok {
			path = pc.address
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
		if err != nil {
			return unhealthy(fmt.Sprintf("containerd socket %s: %v", pc.address, errors.Unwrap(err)))
		}
		conn.Close()
	}
	v, err := c.Version(ctx)
	if err != nil {
		return unhealthy(fmt.Sprintf("containerd at %s does not answer: %v", pc.address, err))
	}
	if problem := snapshotterProblem(ctx, c, pc.snapshotter); problem != "" {
		return unhealthy(problem)
	}
	d.setFingerprint(gen, &driverpb.DriverFingerprint{
		Health:            driverpb.Health_HEALTH_HEALTHY,
		HealthDescription: "healthy",
		Attributes: map[string]string{
			"driver.containerd.version":     v.Version,
			"driver.containerd.revision":    v.Revision,
			"driver.containerd.namespace":   pc.namespace,
			"driver.containerd.snapshotter": pc.snapshotter,
			"driver.containerd.runtime":     pc.runtime,
		},
	})
	return true
}

// snapshotterProblem says why containerd cannot use the snapshotter, or "".
func snapshotterProblem(ctx context.Context, c *client.Client, name string) string {
	resp, err := c.IntrospectionService().Plugins(ctx, `type=="io.containerd.snapshotter.v1"`)
	if err != nil {
		return "" // an older or trimmed containerd: let container creation tell
	}
	for _, p := range resp.GetPlugins() {
		if p.GetID() != name {
			continue
		}
		if ie := p.GetInitErr(); ie != nil {
			return fmt.Sprintf("containerd's snapshotter %q is unavailable: %s", name, ie.GetMessage())
		}
		return ""
	}
	return fmt.Sprintf("containerd has no snapshotter %q", name)
}

func (d *Driver) probeLoop(ctx context.Context, gen uint64, c *client.Client, pc pluginConfig, healthy bool) {
	for {
		every := probeHealthy
		if !healthy {
			every = probeUnhealthy
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		healthy = d.probe(ctx, gen, c, pc)
	}
}

// Fingerprint implements sdk.Driver.
func (d *Driver) Fingerprint(ctx context.Context) iter.Seq2[*driverpb.DriverFingerprint, error] {
	return d.fp.Watch(ctx)
}

// TaskEvents implements sdk.Driver.
func (d *Driver) TaskEvents(ctx context.Context) iter.Seq2[*driverpb.TaskEvent, error] {
	return d.events.Subscribe(ctx)
}
