package adapters

import (
	"context"
	"fmt"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/sdk"
)

// State is an adapter's current condition, as Handle.State reports it.
type State struct {
	// Running is true while an adapter process is up and connected.
	Running bool
	// Healthy is true when the last Probe of the running process said
	// ready.
	Healthy bool
	// Reason says why the adapter is not healthy.
	Reason string
	// Failed is true when the adapter failed for good (an invalid config):
	// it is not restarted until the agent config is fixed.
	Failed bool
	Pid    int
	// APIVersion is the storage API version negotiated with the process.
	APIVersion uint32
	// Restarts counts the processes started after the first one.
	Restarts int
	// Since is when Healthy (or Running) last changed.
	Since time.Time
}

// running is one live adapter process; its Val is the connection to it.
type running = pluginsup.Running[*sdk.StoragePlugin, *grpc.ClientConn]

// instance is one adapter of the catalog: what pluginsup needs to launch
// and probe its process, and the State and events it reports.
type instance struct {
	m      *Manager
	a      Adapter
	sup    *pluginsup.Instance[*sdk.StoragePlugin, *grpc.ClientConn]
	logger hclog.Logger
	handle *Handle

	mu     sync.Mutex
	state  State
	starts int
}

var (
	_ pluginsup.Plugin[*sdk.StoragePlugin, *grpc.ClientConn]   = (*instance)(nil)
	_ pluginsup.Observer[*sdk.StoragePlugin, *grpc.ClientConn] = (*instance)(nil)
)

func newInstance(m *Manager, a Adapter) (*instance, error) {
	in := &instance{m: m, a: a, state: State{Reason: "starting", Since: time.Now()}}
	in.handle = &Handle{in: in}
	sup, err := m.sup.Add(pluginsup.Spec[*sdk.StoragePlugin, *grpc.ClientConn]{
		Name: a.Name, Path: a.Path, Args: a.Args, Builtin: a.Builtin, Err: a.Err,
		Env: in.env(), ConfigDigest: in.configDigest(),
		Wrap:   func(err error) error { return noun.Wrap(in.a, err) },
		Plugin: in, Observer: in,
	})
	if err != nil {
		return nil, err
	}
	in.sup, in.logger = sup, sup.Logger()
	return in, nil
}

// supervisorErrors are the manager's answers to pluginsup.
var supervisorErrors = pluginsup.Errors{
	Fatal:       isConfigError,
	Unavailable: unavailable,
}

// unavailable is the error of a call that found no adapter process
// before its deadline, joined to the last failure.
func unavailable(o pluginsup.Outage) error {
	cause := fmt.Errorf("storage adapter %q (%s)", o.Name, o.Reason)
	if o.Waited != nil {
		cause = fmt.Errorf("%w while waiting: %w", cause, o.Waited)
	}
	if o.LastErr != nil {
		cause = fmt.Errorf("%w; last failure: %w", cause, o.LastErr)
	}
	return fmt.Errorf("%w: %w", ErrAdapterUnavailable, cause)
}

// Watch implements pluginsup.Plugin: it probes the adapter until its
// process exits or ctx ends. Probes come at a fast cadence until the
// adapter is healthy, then every HealthInterval.
func (in *instance) Watch(ctx context.Context, r *running) error {
	cfg := in.m.cfg
	identity := csipb.NewIdentityClient(r.Val)
	fast := backoff.Backoff{Initial: cfg.ProbeStart, Max: cfg.HealthInterval}
	unhealthy := 0
	for {
		pctx, cancel := context.WithTimeout(ctx, cfg.ProbeTimeout)
		resp, err := identity.Probe(pctx, &csipb.ProbeRequest{})
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.Proc.Exited() {
			return fmt.Errorf("adapter process (pid %d) exited", r.Pid)
		}
		next := cfg.HealthInterval
		switch {
		case err != nil:
			in.setHealth(r, false, fmt.Sprintf("Probe failed: %v", err))
		case resp.GetReady() != nil && !resp.GetReady().GetValue():
			in.setHealth(r, false, "Probe says the plugin is not ready")
		default:
			in.setHealth(r, true, "")
		}
		if healthy := in.currentState().Healthy; !healthy {
			unhealthy++
			next = fast.Delay(unhealthy)
		} else {
			unhealthy = 0
		}
		in.sup.Settled()
		t := time.NewTimer(next)
		select {
		case <-t.C:
		case <-r.Proc.Adapter().Done():
			t.Stop()
			return fmt.Errorf("adapter process (pid %d) exited", r.Pid)
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// Up implements pluginsup.Observer: the adapter runs, not yet probed.
func (in *instance) Up(r *running, reattached bool) {
	in.mu.Lock()
	if in.starts > 0 {
		in.state.Restarts++
	}
	in.starts++
	in.state.Running, in.state.Healthy, in.state.Pid = true, false, r.Pid
	in.state.Reason = "not probed yet"
	in.state.APIVersion = r.Proc.Adapter().APIVersion()
	in.state.Since = time.Now()
	in.mu.Unlock()
	kind := EventStarted
	if reattached {
		kind = EventReattached
	}
	in.m.publish(Event{Adapter: in.a.Name, Kind: kind, Pid: r.Pid})
	in.logger.Info("storage adapter running", "pid", r.Pid, "reattached", reattached, "api_version", r.Proc.Adapter().APIVersion())
}

// Down implements pluginsup.Observer: no process runs, and an event says
// why.
func (in *instance) Down(d pluginsup.Down) {
	in.mu.Lock()
	in.state.Failed = in.state.Failed || d.Failed
	if in.state.Running || in.state.Healthy {
		in.state.Since = time.Now()
	}
	in.state.Running, in.state.Healthy, in.state.Pid, in.state.Reason = false, false, 0, d.Reason
	in.mu.Unlock()
	ev := Event{Adapter: in.a.Name, Kind: EventStartFailed, Reason: pluginsup.OneLine(d.Err), Delay: d.Delay}
	if d.Pid != 0 {
		ev.Kind, ev.Pid, ev.Reason = EventExited, d.Pid, d.Cause.Error()
	}
	in.m.publish(ev)
}

// setHealth records a probe's outcome for r and publishes a change.
func (in *instance) setHealth(r *running, healthy bool, reason string) {
	in.mu.Lock()
	if in.sup.Current() != r || (in.state.Healthy == healthy && in.state.Reason == reason) {
		in.mu.Unlock()
		return
	}
	changed := in.state.Healthy != healthy || in.state.Since.IsZero() || in.state.Reason == "not probed yet"
	in.state.Healthy, in.state.Reason = healthy, reason
	if changed {
		in.state.Since = time.Now()
	}
	in.mu.Unlock()
	if !changed {
		return
	}
	kind := EventHealthy
	if !healthy {
		kind = EventUnhealthy
		in.logger.Warn("storage adapter unhealthy", "reason", reason)
	}
	in.m.publish(Event{Adapter: in.a.Name, Kind: kind, Pid: r.Pid, Reason: reason})
}

func (in *instance) currentState() State {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.state
}
