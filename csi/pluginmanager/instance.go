package pluginmanager

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/rpc/pb"
)

// instKey names an instance: a storage adapter by name, or a task plugin
// by plugin ID, alloc and socket (a monolith task's controller and node
// entries are one instance: one socket, one fingerprint; a group that runs
// a plugin's controller and node as two tasks has two).
type instKey struct {
	adapter  string
	pluginID string
	allocID  string
	endpoint string
}

func taskKey(r *pb.CSIPluginRegistration) instKey {
	return instKey{pluginID: r.GetPluginId(), allocID: r.GetAllocId(), endpoint: r.GetEndpoint()}
}

func (k instKey) String() string {
	if k.adapter != "" {
		return fmt.Sprintf("storage adapter %q", k.adapter)
	}
	return fmt.Sprintf("plugin %q of alloc %s", k.pluginID, k.allocID)
}

// instance is one plugin instance on the node, owned by the manager's
// loop; its worker fingerprints it and sends back results.
type instance struct {
	key      instKey
	pluginID string
	source   pb.CSIPluginSource
	allocID  string

	// entries are a task plugin's registry entries by type (controller,
	// node); endpoint is where they say its socket is.
	entries  map[pb.CSIPluginType]registry.Entry
	endpoint string

	// srcHealthy and srcReason are an adapter's health as its manager
	// last reported it.
	srcHealthy bool
	srcReason  string
	// replaced is set while a task-launched plugin of an adapter's ID
	// serves it on the node (build).
	replaced bool

	// attempted is set once a fingerprint finished, well or not; fp is the
	// last good one and fpErr the last attempt's failure (nil when it
	// succeeded).
	attempted bool
	fp        *csi.Fingerprint
	fpErr     error

	// health is the last health reported per type, with since the time
	// it took that value (the info's updated_at).
	health map[pb.CSIPluginType]healthMark

	w *worker
}

type healthMark struct {
	healthy bool
	since   int64
}

// monolith reports whether the instance serves both sides.
func (in *instance) monolith() bool {
	if in.source == pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER {
		return in.fp != nil && in.fp.HasController() && in.fp.HasNode()
	}
	return len(in.entries) == 2
}

// adapterSides are the types an adapter is reported as: what its last good
// fingerprint says it serves (none before one).
func (in *instance) adapterSides() []pb.CSIPluginType {
	var out []pb.CSIPluginType
	if in.fp == nil {
		return nil
	}
	if in.fp.HasController() {
		out = append(out, pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER)
	}
	if in.fp.HasNode() {
		out = append(out, pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE)
	}
	return out
}

// healthOf says whether the instance serves side, and why not. The
// source's word comes first (the supervisor's last check, the adapter
// manager's), then the manager's own fingerprint. A restored registry
// entry's health dates from before the client restarted: only the probe
// counts until the supervisor checks it again.
func (in *instance) healthOf(side pb.CSIPluginType) (bool, string) {
	switch in.source {
	case pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK:
		e := in.entries[side]
		if r := e.Registration; !e.NeedsProbe && !r.GetHealthy() {
			if r.GetHealthDescription() != "" {
				return false, r.GetHealthDescription()
			}
			return false, "unhealthy (plugin supervisor)"
		}
	default:
		if !in.srcHealthy {
			if in.srcReason != "" {
				return false, "storage adapter: " + in.srcReason
			}
			return false, "storage adapter is not healthy"
		}
	}
	switch {
	case in.fpErr != nil:
		return false, "fingerprint: " + in.fpErr.Error()
	case in.fp == nil:
		return false, "not fingerprinted yet"
	case !in.fp.Ready:
		return false, "probe: plugin is not ready"
	case side == pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER && !in.fp.HasController():
		return false, "plugin does not serve the controller service"
	case side == pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE && !in.fp.HasNode():
		return false, "plugin does not serve the node service"
	}
	return true, ""
}

// info is what the node reports of the instance as a side: the last good
// fingerprint (or, for a task never fingerprinted, what its registration
// says) with the instance's current health. updated_at moves only when
// the health does, so a refresh that finds nothing new sends nothing.
func (in *instance) info(side pb.CSIPluginType, now time.Time) *pb.CSIPluginInfo {
	typ := side
	if in.monolith() {
		typ = pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH
	}
	var info *pb.CSIPluginInfo
	if in.fp != nil {
		info = in.fp.PluginInfo(in.pluginID, typ, in.source, in.allocID)
	} else {
		r := in.entries[side].Registration
		info = &pb.CSIPluginInfo{PluginId: in.pluginID, Type: typ, Source: in.source, AllocId: in.allocID,
			Provider: r.GetProvider(), ProviderVersion: r.GetProviderVersion()}
	}
	info.Healthy, info.HealthDescription = in.healthOf(side)
	mark, ok := in.health[side]
	if !ok || mark.healthy != info.Healthy {
		mark = healthMark{healthy: info.Healthy, since: now.UnixNano()}
		in.health[side] = mark
	}
	info.UpdatedAt = mark.since
	return info
}

// worker fingerprints one instance: at once, then every refresh interval
// while it is healthy, sooner (backing off) while it fails, and whenever
// kicked.
type worker struct {
	// client is the instance's connection once made (nil before): the
	// node's forwarded controller calls use it (Manager.Controller).
	client atomic.Pointer[csi.Client]
	gen    uint64
	kick   chan struct{}
	cancel context.CancelFunc
}

// poke asks the worker to fingerprint again now.
func (w *worker) poke() {
	select {
	case w.kick <- struct{}{}:
	default: // one is pending already
	}
}

// result is one fingerprint attempt of the instance the worker of
// generation gen serves.
type result struct {
	key instKey
	gen uint64
	fp  *csi.Fingerprint
	err error
}

// startWorker starts a worker for in that gets its client from connect.
func (m *Manager) startWorker(in *instance, connect func() (*csi.Client, error)) {
	m.gen++
	ctx, cancel := context.WithCancel(m.ctx)
	w := &worker{gen: m.gen, kick: make(chan struct{}, 1), cancel: cancel}
	in.w = w
	key := in.key
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.work(ctx, key, w, connect)
	}()
}

func (m *Manager) stopWorker(in *instance) {
	if in.w != nil {
		in.w.cancel()
		in.w = nil
	}
}

func (m *Manager) work(ctx context.Context, key instKey, w *worker, connect func() (*csi.Client, error)) {
	report := func(fp *csi.Fingerprint, err error) bool {
		select {
		case m.results <- result{key: key, gen: w.gen, fp: fp, err: err}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	c, err := connect()
	if err != nil {
		// Only a malformed endpoint fails here; a new registration with
		// another endpoint gets a new worker.
		report(nil, err)
		<-ctx.Done()
		return
	}
	defer c.Close()
	w.client.Store(c)
	defer w.client.Store(nil)
	wait := backoff.Backoff{Initial: m.cfg.RetryStart, Max: m.cfg.RefreshInterval}
	failures := 0
	for {
		fctx, cancel := context.WithTimeout(ctx, m.cfg.FingerprintTimeout)
		fp, err := fingerprint(fctx, c)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if !report(fp, err) {
			return
		}
		next := m.cfg.RefreshInterval
		if err != nil || !fp.Ready {
			// Nobody else will say when a plugin its source calls
			// healthy answers again: look sooner than the refresh.
			failures++
			next = wait.Delay(failures)
		} else {
			failures = 0
		}
		t := time.NewTimer(next)
		select {
		case <-w.kick:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// fingerprint asks the plugin what csi.Client.Fingerprint does, with one
// difference: a plugin that advertises the controller service but answers
// ControllerGetCapabilities with Unimplemented (a node-only deployment of a
// driver that advertises the same identity in every mode) is fingerprinted
// without controller capabilities rather than failed.
func fingerprint(ctx context.Context, c *csi.Client) (*csi.Fingerprint, error) {
	var (
		f   csi.Fingerprint
		err error
	)
	if f.Info, err = c.Identity.GetPluginInfo(ctx); err != nil {
		return nil, err
	}
	if f.Ready, err = c.Identity.Probe(ctx); err != nil {
		return nil, err
	}
	if f.Plugin, err = c.Identity.GetPluginCapabilities(ctx); err != nil {
		return nil, err
	}
	if f.Plugin.HasService(csipb.PluginCapability_Service_CONTROLLER_SERVICE) {
		if f.Controller, err = c.Controller.ControllerGetCapabilities(ctx); err != nil && !unimplemented(err) {
			return nil, err
		}
	}
	f.Node, err = c.Node.NodeGetCapabilities(ctx)
	switch {
	case unimplemented(err):
		return &f, nil
	case err != nil:
		return nil, err
	}
	if f.NodeInfo, err = c.Node.NodeGetInfo(ctx); err != nil {
		return nil, err
	}
	return &f, nil
}

func unimplemented(err error) bool {
	var e *csi.Error
	return errors.As(err, &e) && e.Code == codes.Unimplemented
}
