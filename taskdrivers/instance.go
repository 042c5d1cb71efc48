package taskdrivers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// instance supervises one driver of the catalog: a goroutine (run) that
// launches its plugin, watches it and restarts it, and the state that
// Driver calls and DriverInfos read.
type instance struct {
	m      *Manager
	p      Plugin
	logger hclog.Logger
	// restart carries the generation of a plugin a caller found gone.
	restart chan uint64

	firstDone chan struct{}
	firstOnce sync.Once

	mu   sync.Mutex
	info *pb.DriverInfo
	// cur is the running plugin, nil while there is none.
	cur *running
	// ready is closed when cur is set; replaced when cur is cleared.
	ready chan struct{}
	gen   uint64
	// fatal is a failure no restart fixes (an invalid config).
	fatal error
	// lastErr is why no plugin runs now, for StartTask's error.
	lastErr error
}

// running is one live plugin process of an instance.
type running struct {
	gen       uint64
	proc      *sdk.DriverPlugin
	client    *sdk.DriverClient
	pid       int
	sockDir   string
	version   string
	schemas   *driverpb.ConfigSchemas
	caps      *driverpb.DriverCapabilities
	startedAt time.Time
}

func newInstance(m *Manager, p Plugin) *instance {
	in := &instance{
		m:         m,
		p:         p,
		logger:    m.logger.With("driver", p.Name),
		restart:   make(chan uint64, 1),
		firstDone: make(chan struct{}),
		ready:     make(chan struct{}),
	}
	in.info = in.baseInfo()
	in.info.HealthDescription = "starting"
	return in
}

func (in *instance) markFirstDone() { in.firstOnce.Do(func() { close(in.firstDone) }) }

// run is the supervisor: launch, watch, restart with backoff, until ctx
// ends. rec is the reattach record left by the previous client, if any.
func (in *instance) run(ctx context.Context, rec *pb.DriverPluginRecord) {
	defer in.markFirstDone()
	if in.p.Err != nil && isConfigError(in.p.Err) {
		in.fail(in.p.Err)
		return
	}
	backoff := in.m.cfg.Backoff
	attempt := 0
	lastLogged := ""
	for {
		r, err := in.launch(ctx, rec)
		rec = nil
		if ctx.Err() != nil {
			if r != nil {
				in.setReady(r) // Shutdown stops it
			}
			return
		}
		if err != nil {
			if isConfigError(err) {
				in.logger.Error("driver plugin config is invalid; the driver stays unavailable until the agent config is fixed", "error", err)
				in.fail(err)
				return
			}
			attempt++
			delay := backoff.Delay(attempt)
			in.setDown(err, fmt.Sprintf("%s; retrying in %s (attempt %d)", oneLine(err), delay, attempt))
			// Said once at error level; repeats of the same failure
			// every minute would only bury other logs.
			if msg := err.Error(); msg != lastLogged {
				in.logger.Error("driver plugin unavailable", "error", err, "retry_in", delay, "attempt", attempt)
				lastLogged = msg
			} else {
				in.logger.Debug("driver plugin still unavailable", "error", err, "retry_in", delay, "attempt", attempt)
			}
			in.markFirstDone()
			if !sleep(ctx.Done(), delay) {
				return
			}
			continue
		}
		in.setReady(r)
		lastLogged = ""
		in.logger.Info("driver plugin running", "pid", r.pid, "version", r.version, "api_version", r.client.APIVersion())
		cause := in.watch(ctx, r)
		if ctx.Err() != nil {
			return
		}
		in.clearCurrent(r)
		r.stop() // a plugin that stopped answering may still be there
		in.m.deleteRecord(in.p.Name)
		if time.Since(r.startedAt) >= in.m.cfg.ResetAfter {
			attempt = 0
		}
		attempt++
		delay := backoff.Delay(attempt)
		err = in.p.errorf(fmt.Errorf("%w: %v", ErrPluginExited, cause))
		in.setDown(err, fmt.Sprintf("%s; restarting in %s (restart %d)", oneLine(err), delay, attempt))
		in.logger.Warn("driver plugin exited; restarting it", "cause", cause, "restart_in", delay, "restart", attempt)
		if !sleep(ctx.Done(), delay) {
			return
		}
	}
}

// watch consumes the plugin's fingerprint stream until the plugin dies, a
// caller reports it gone, or ctx ends, and returns why it stopped. A
// stream that fails while the plugin lives leaves the driver unhealthy
// and is opened again.
func (in *instance) watch(ctx context.Context, r *running) error {
	for {
		sctx, cancel := context.WithCancel(ctx)
		reported := make(chan struct{})
		go func() {
			for {
				select {
				case gen := <-in.restart:
					if gen == r.gen {
						close(reported)
						cancel()
						return
					}
				case <-sctx.Done():
					return
				}
			}
		}()
		var streamErr error
		for fp, err := range r.client.Fingerprint(sctx) {
			if err != nil {
				streamErr = err
				break
			}
			in.applyFingerprint(r, fp)
			in.markFirstDone()
		}
		cancel()
		select {
		case <-reported:
			return fmt.Errorf("plugin (pid %d) stopped answering calls", r.pid)
		default:
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.proc.Exited() {
			return fmt.Errorf("plugin process (pid %d) exited", r.pid)
		}
		if errors.Is(streamErr, sdk.ErrPluginShutdown) {
			return fmt.Errorf("plugin (pid %d) is gone: %v", r.pid, streamErr)
		}
		desc := "plugin ended its fingerprint stream"
		if streamErr != nil {
			desc = fmt.Sprintf("fingerprint failed: %v", streamErr)
		}
		in.setUnhealthy(desc)
		in.markFirstDone()
		in.logger.Warn("driver fingerprint stream ended; reopening it", "error", streamErr)
		if !sleep(ctx.Done(), in.m.cfg.Backoff.Initial) {
			return ctx.Err()
		}
	}
}

// acquire returns the running plugin. Without wait it fails at once with
// ErrDriverUnavailable when there is none; with wait it waits for the
// supervisor to (re)start it, until ctx ends. Either way a driver that
// failed for good is ErrDriverFailed.
func (in *instance) acquire(ctx context.Context, wait bool) (*running, error) {
	for {
		in.mu.Lock()
		cur, ready, fatal, lastErr, desc := in.cur, in.ready, in.fatal, in.lastErr, in.info.GetHealthDescription()
		in.mu.Unlock()
		switch {
		case fatal != nil:
			return nil, fmt.Errorf("%w: %w", ErrDriverFailed, fatal)
		case in.m.ctx.Err() != nil:
			return nil, ErrShutdown
		case cur != nil:
			return cur, nil
		case !wait && lastErr != nil:
			return nil, errcode.Fallback(ErrDriverUnavailable, lastErr)
		case !wait:
			return nil, fmt.Errorf("%w: driver %q: %s", ErrDriverUnavailable, in.p.Name, desc)
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for driver %q (%s): %w", in.p.Name, desc, ctx.Err())
		case <-in.m.ctx.Done():
			return nil, ErrShutdown
		}
	}
}

// gone is how a caller reports that r failed a call with ErrPluginShutdown:
// calls wait for the next plugin from now on, and the supervisor restarts.
func (in *instance) gone(r *running) {
	in.clearCurrent(r)
	select {
	case in.restart <- r.gen:
	default:
	}
}

func (in *instance) setReady(r *running) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.cur = r
	in.lastErr = nil
	select {
	case <-in.ready:
	default:
		close(in.ready)
	}
}

// clearCurrent forgets r if it is still the running plugin.
func (in *instance) clearCurrent(r *running) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cur == r {
		in.cur = nil
		in.ready = make(chan struct{})
	}
}

// takeCurrent forgets and returns the running plugin, for Shutdown.
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

// fail records a failure that no restart fixes.
func (in *instance) fail(err error) {
	in.mu.Lock()
	in.fatal = err
	in.mu.Unlock()
	in.setDown(err, oneLine(err))
}

// oneLine is err's message on one line, for a health description that
// `berth node status` prints in a table; go-plugin's start errors span
// several lines.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

func (in *instance) fatalErr() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.fatal
}
