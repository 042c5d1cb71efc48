package csiadapters

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"berth.dev/berth/internal/pluginproc"
	"berth.dev/berth/rpc/pb"
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

// instance supervises one adapter of the catalog: a goroutine (run) that
// launches its process, probes it and restarts it.
type instance struct {
	m      *Manager
	a      Adapter
	logger hclog.Logger
	handle *Handle
	// restart carries the generation of a process a caller found gone.
	restart chan uint64

	firstDone chan struct{}
	firstOnce sync.Once

	mu    sync.Mutex
	state State
	// cur is the running process, nil while there is none.
	cur *running
	// ready is closed when cur is set; replaced when cur is cleared.
	ready   chan struct{}
	gen     uint64
	fatal   error
	lastErr error
	starts  int
}

// running is one live adapter process.
type running struct {
	gen       uint64
	proc      *sdk.StoragePlugin
	conn      *grpc.ClientConn
	pid       int
	sockDir   string
	startedAt time.Time
}

func newInstance(m *Manager, a Adapter) *instance {
	in := &instance{
		m:         m,
		a:         a,
		logger:    m.logger.With("adapter", a.Name),
		restart:   make(chan uint64, 1),
		firstDone: make(chan struct{}),
		ready:     make(chan struct{}),
		state:     State{Reason: "starting", Since: time.Now()},
	}
	in.handle = &Handle{in: in}
	return in
}

func (in *instance) markFirstDone() { in.firstOnce.Do(func() { close(in.firstDone) }) }

// run is the supervisor: launch, probe, restart with backoff, until ctx
// ends. rec is the reattach record left by the previous client, if any.
func (in *instance) run(ctx context.Context, rec *pb.StorageAdapterRecord) {
	defer in.markFirstDone()
	if in.a.Err != nil && isConfigError(in.a.Err) {
		in.fail(in.a.Err)
		return
	}
	backoff := in.m.cfg.Backoff
	attempt := 0
	lastLogged := ""
	for {
		r, reattached, err := in.launch(ctx, rec)
		rec = nil
		if ctx.Err() != nil {
			if r != nil {
				in.setRunning(r) // Shutdown stops it
			}
			return
		}
		if err != nil {
			attempt++
			delay := backoff.Delay(attempt)
			in.setDown(err, fmt.Sprintf("%s; retrying in %s (attempt %d)", oneLine(err), delay, attempt))
			in.m.publish(Event{Adapter: in.a.Name, Kind: EventStartFailed, Reason: oneLine(err), Delay: delay})
			if msg := err.Error(); msg != lastLogged {
				in.logger.Error("storage adapter unavailable", "error", err, "retry_in", delay, "attempt", attempt)
				lastLogged = msg
			} else {
				in.logger.Debug("storage adapter still unavailable", "error", err, "retry_in", delay, "attempt", attempt)
			}
			in.markFirstDone()
			if !pluginproc.Sleep(ctx.Done(), delay) {
				return
			}
			continue
		}
		lastLogged = ""
		in.setRunning(r)
		kind := EventStarted
		if reattached {
			kind = EventReattached
		}
		in.m.publish(Event{Adapter: in.a.Name, Kind: kind, Pid: r.pid})
		in.logger.Info("storage adapter running", "pid", r.pid, "reattached", reattached, "api_version", r.proc.Adapter().APIVersion())
		cause := in.watch(ctx, r)
		if ctx.Err() != nil {
			return
		}
		in.clearCurrent(r)
		r.stop()
		in.m.deleteRecord(in.a.Name)
		if time.Since(r.startedAt) >= in.m.cfg.ResetAfter {
			attempt = 0
		}
		attempt++
		delay := backoff.Delay(attempt)
		err = in.a.errorf(fmt.Errorf("%w: %v", ErrAdapterExited, cause))
		in.setDown(err, fmt.Sprintf("%s; restarting in %s (restart %d)", oneLine(err), delay, attempt))
		in.m.publish(Event{Adapter: in.a.Name, Kind: EventExited, Pid: r.pid, Reason: cause.Error(), Delay: delay})
		in.logger.Warn("storage adapter exited; restarting it", "cause", cause, "restart_in", delay, "restart", attempt)
		if !pluginproc.Sleep(ctx.Done(), delay) {
			return
		}
	}
}

// watch probes the adapter until its process exits, a caller reports it
// gone, or ctx ends, and returns why it stopped. Probes come at a fast
// cadence until the adapter is healthy, then every HealthInterval.
func (in *instance) watch(ctx context.Context, r *running) error {
	cfg := in.m.cfg
	identity := csipb.NewIdentityClient(r.conn)
	fast := cfg.ProbeStart
	for {
		pctx, cancel := context.WithTimeout(ctx, cfg.ProbeTimeout)
		resp, err := identity.Probe(pctx, &csipb.ProbeRequest{})
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.proc.Exited() {
			return fmt.Errorf("adapter process (pid %d) exited", r.pid)
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
			next = fast
			fast = min(2*fast, cfg.HealthInterval)
		} else {
			fast = cfg.ProbeStart
		}
		in.markFirstDone()
		t := time.NewTimer(next)
		select {
		case <-t.C:
		case <-r.proc.Adapter().Done():
			t.Stop()
			return fmt.Errorf("adapter process (pid %d) exited", r.pid)
		case gen := <-in.restart:
			t.Stop()
			if gen == r.gen {
				return fmt.Errorf("adapter (pid %d) stopped answering calls", r.pid)
			}
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// acquire returns the running process, waiting for the supervisor to
// (re)start it until ctx ends.
func (in *instance) acquire(ctx context.Context) (*running, error) {
	for {
		in.mu.Lock()
		cur, ready, fatal, lastErr, reason := in.cur, in.ready, in.fatal, in.lastErr, in.state.Reason
		in.mu.Unlock()
		switch {
		case fatal != nil:
			return nil, fmt.Errorf("%w: %w", ErrAdapterFailed, fatal)
		case in.m.ctx.Err() != nil:
			return nil, ErrShutdown
		case cur != nil:
			return cur, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			cause := fmt.Errorf("storage adapter %q (%s) while waiting: %w", in.a.Name, reason, ctx.Err())
			if lastErr != nil {
				cause = fmt.Errorf("%w; last failure: %w", cause, lastErr)
			}
			return nil, fmt.Errorf("%w: %w", ErrAdapterUnavailable, cause)
		case <-in.m.ctx.Done():
			return nil, ErrShutdown
		}
	}
}

// gone is how a caller reports that r's process is gone: calls wait for
// the next process from now on, and the supervisor restarts.
func (in *instance) gone(r *running) {
	in.clearCurrent(r)
	select {
	case in.restart <- r.gen:
	default:
	}
}

func (in *instance) setRunning(r *running) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.cur = r
	in.lastErr = nil
	if in.starts > 0 {
		in.state.Restarts++
	}
	in.starts++
	in.state.Running, in.state.Healthy, in.state.Pid = true, false, r.pid
	in.state.Reason = "not probed yet"
	in.state.APIVersion = r.proc.Adapter().APIVersion()
	in.state.Since = time.Now()
	select {
	case <-in.ready:
	default:
		close(in.ready)
	}
}

// setHealth records a probe's outcome for r and publishes a change.
func (in *instance) setHealth(r *running, healthy bool, reason string) {
	in.mu.Lock()
	if in.cur != r || (in.state.Healthy == healthy && in.state.Reason == reason) {
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
	in.m.publish(Event{Adapter: in.a.Name, Kind: kind, Pid: r.pid, Reason: reason})
}

// setDown records that no process runs, because of err.
func (in *instance) setDown(err error, reason string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.lastErr = err
	if in.state.Running || in.state.Healthy {
		in.state.Since = time.Now()
	}
	in.state.Running, in.state.Healthy, in.state.Pid, in.state.Reason = false, false, 0, reason
}

// clearCurrent forgets r if it is still the running process.
func (in *instance) clearCurrent(r *running) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cur == r {
		in.cur = nil
		in.ready = make(chan struct{})
	}
}

// takeCurrent forgets and returns the running process, for Shutdown.
func (in *instance) takeCurrent() *running {
	in.mu.Lock()
	defer in.mu.Unlock()
	r := in.cur
	if r != nil {
		in.cur = nil
		in.ready = make(chan struct{})
	}
	return r
}

func (in *instance) nextGen() uint64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.gen++
	return in.gen
}

func (in *instance) currentState() State {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.state
}

// fail records a failure that no restart fixes.
func (in *instance) fail(err error) {
	in.mu.Lock()
	in.fatal = err
	in.state.Failed = true
	in.mu.Unlock()
	in.setDown(err, oneLine(err))
	in.logger.Error("storage adapter config is invalid; the adapter stays down until the agent config is fixed", "error", err)
	in.m.publish(Event{Adapter: in.a.Name, Kind: EventStartFailed, Reason: oneLine(err)})
}

func (in *instance) fatalErr() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.fatal
}

// oneLine is err's message on one line (go-plugin's start errors span
// several), for a health reason shown in a table.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
