package volumehooks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/csi"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/pb"
)

// Task event types of the supervisor, in the words of alloc.proto's
// TaskEvent.
const (
	EventPluginHealthy   = "Plugin became healthy"
	EventPluginUnhealthy = "Plugin became unhealthy"
	// EventPluginHealthTimeout: the plugin was not healthy within its
	// health_timeout of starting, or stayed unhealthy that long after it
	// had been healthy; the task is restarted per its restart policy.
	EventPluginHealthTimeout = "Plugin health timeout"
)

var (
	// errNotReady is a Probe that answered "not ready".
	errNotReady = errors.New("the plugin answers Probe with ready = false")
	// errNoSocket is a plugin that has not created its socket yet.
	errNoSocket = errors.New("no socket")
)

// supervisor watches one attempt of a plugin task: it probes the plugin
// until it is ready, registers it, then follows its health until stopped.
type supervisor struct {
	cfg       SupervisorConfig
	logger    hclog.Logger
	info      runhooks.TaskInfo
	taskID    string
	recovered bool
	p         *prepared

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// client is the connection to the plugin, nil until dialled and after
	// a failed call (a fresh dial does not wait out gRPC's reconnect
	// backoff, so a restarted plugin is seen at the next probe).
	client *csi.Client
}

func newSupervisor(cfg SupervisorConfig, logger hclog.Logger, info runhooks.TaskInfo, taskID string, recovered bool, p *prepared) *supervisor {
	ctx, cancel := context.WithCancel(cfg.Context)
	return &supervisor{cfg: cfg, logger: logger, info: info, taskID: taskID, recovered: recovered, p: p,
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

func (s *supervisor) pluginID() string { return s.p.plugin.GetId() }

func (s *supervisor) run() {
	defer close(s.done)
	defer s.dropClient()
	if !s.start() {
		return
	}
	s.watch()
}

// start probes the plugin at the start cadence until it is ready and
// registered, and reports whether it is. Past the health timeout it asks
// for a restart of the attempt (counted by the restart policy) instead; a
// task that cannot be restarted (no lifecycle) is still probed, with no
// health deadline, and registered if it becomes ready.
func (s *supervisor) start() bool {
	deadline := s.cfg.Clock.Now().Add(s.p.healthTimeout) // zero: none
	probes := backoff.Backoff{Initial: s.cfg.StartProbeInterval, Max: s.cfg.MaxStartProbeInterval}
	// answered counts the failed checks of a plugin that answered.
	answered := 0
	// last is why the plugin is not healthy, for the timeout's event.
	var last error
	for {
		// A check never runs past the health deadline, so a plugin that
		// hangs on Probe is restarted on time.
		callDeadline := deadline
		if deadline.IsZero() {
			callDeadline = s.cfg.Clock.Now().Add(s.cfg.CallTimeout)
		}
		ctx, cancel := s.until(callDeadline)
		info, err := s.check(ctx)
		cutShort := ctx.Err() != nil
		// The deadline's timer is stopped before anything is registered
		// or reported: once the plugin is registered, the only wait left
		// on the clock is watch's.
		cancel()
		if err == nil && s.ctx.Err() == nil { // a stopped supervisor registers nothing
			err = s.register(info)
		}
		if s.ctx.Err() != nil {
			return false
		}
		if err == nil {
			return true
		}
		// A call the health deadline cut short says less than the
		// answer before it ("ready = false", say).
		if last == nil || !cutShort {
			last = err
		}
		left := s.cfg.MaxStartProbeInterval
		if !deadline.IsZero() {
			if left = deadline.Sub(s.cfg.Clock.Now()); left <= 0 {
				if s.giveUp(last) {
					return false
				}
				deadline, left = time.Time{}, s.cfg.MaxStartProbeInterval
			}
		}
		s.logger.Trace("csi plugin not ready yet", "error", err)
		// Looking for the socket costs a stat, so it is looked for at the
		// fast cadence throughout: a plugin is registered as soon as it
		// listens. Only a plugin that answers (not ready, or an error)
		// is probed less and less often.
		wait := s.cfg.StartProbeInterval
		if !errors.Is(err, errNoSocket) {
			answered++
			wait = probes.Delay(answered)
		}
		if !s.sleep(min(wait, left)) {
			return false
		}
	}
}

// sleep waits d on the clock, and reports false when the supervisor is
// stopped first.
func (s *supervisor) sleep(d time.Duration) bool {
	fired := make(chan struct{})
	t := s.cfg.Clock.AfterFunc(d, func() { close(fired) })
	select {
	case <-s.ctx.Done():
		t.Stop()
		return false
	case <-fired:
		return true
	}
}

// until is the supervisor's context, cut at deadline on the clock.
func (s *supervisor) until(deadline time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(s.ctx)
	t := s.cfg.Clock.AfterFunc(deadline.Sub(s.cfg.Clock.Now()), cancel)
	return ctx, func() {
		t.Stop()
		cancel()
	}
}

// check probes the plugin and, when it is ready, asks for its provider.
func (s *supervisor) check(ctx context.Context) (csi.PluginInfo, error) {
	ready, err := s.probe(ctx)
	switch {
	case err != nil:
		return csi.PluginInfo{}, err
	case !ready:
		return csi.PluginInfo{}, errNotReady
	}
	info, err := s.client.Identity.GetPluginInfo(ctx)
	if err != nil {
		s.dropClient()
		return csi.PluginInfo{}, err
	}
	return info, nil
}

// probe asks the plugin whether it is ready. A socket the plugin has not
// created yet is not dialled.
func (s *supervisor) probe(ctx context.Context) (bool, error) {
	if _, err := os.Stat(s.p.socket); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("%w at %s yet", errNoSocket, s.p.socket)
		}
		return false, err
	}
	if s.client == nil {
		c, err := csi.Dial("unix://"+s.p.socket, csi.WithLogger(s.logger),
			csi.WithTimeouts(csi.Timeouts{csi.CallProbe: s.cfg.CallTimeout, csi.CallGetPluginInfo: s.cfg.CallTimeout}))
		if err != nil {
			return false, err
		}
		s.client = c
	}
	ready, err := s.client.Identity.Probe(ctx)
	if err != nil {
		s.dropClient()
	}
	return ready, err
}

func (s *supervisor) dropClient() {
	if s.client != nil {
		_ = s.client.Close()
		s.client = nil
	}
}

// register puts the ready plugin in the registry, healthy, and says so.
func (s *supervisor) register(info csi.PluginInfo) error {
	plugin := s.p.plugin
	endpoint := "unix://" + s.p.socket
	err := s.cfg.Registry.Register(&pb.CSIPluginRegistration{
		Type: s.p.typ, PluginId: plugin.GetId(), AllocId: s.info.Alloc.GetId(),
		Endpoint: endpoint, Provider: info.Name, ProviderVersion: info.VendorVersion,
		Healthy: true, AllocCreateIndex: s.info.Alloc.GetCreateIndex(), StagePublishDir: s.p.stageDir,
	})
	if err != nil {
		s.logger.Error("registering a ready csi plugin", "error", err)
		return err
	}
	msg := fmt.Sprintf("CSI %s plugin %q (%s %s) is ready at %s", plugin.GetType(), plugin.GetId(), info.Name, info.VendorVersion, endpoint)
	if s.recovered {
		msg += " (after a client restart)"
	}
	s.emit(EventPluginHealthy, msg, map[string]string{
		"plugin_id": plugin.GetId(), "plugin_type": plugin.GetType(), "provider": info.Name,
		"version": info.VendorVersion, "endpoint": endpoint,
	})
	s.logger.Info("csi plugin registered", "provider", info.Name, "version", info.VendorVersion, "endpoint", endpoint)
	return nil
}

// giveUp reports a plugin that was not healthy within its health timeout
// and restarts its attempt as a failure; it reports whether it asked for
// the restart.
func (s *supervisor) giveUp(last error) bool {
	reason := fmt.Sprintf("CSI plugin %q did not become healthy within %s: %v", s.pluginID(), s.p.healthTimeout, last)
	s.logger.Warn("csi plugin not healthy in time; restarting its task", "health_timeout", s.p.healthTimeout, "error", last)
	s.emit(EventPluginHealthTimeout, reason, map[string]string{
		"plugin_id": s.pluginID(), "health_timeout_ms": fmt.Sprint(s.p.healthTimeout.Milliseconds()), "reason": last.Error(),
	})
	return s.restart(reason)
}

// restart restarts the task's attempt as a failure, so the group's restart
// policy counts it as it counts a crash, and reports whether it asked for
// one: a runner without a lifecycle cannot restart the task.
func (s *supervisor) restart(reason string) bool {
	if s.info.Lifecycle == nil {
		s.logger.Error("cannot restart the plugin task: its runner gave no lifecycle")
		return false
	}
	if err := s.info.Lifecycle.Restart(s.taskID, reason, true); err != nil {
		// The attempt ended meanwhile: its exit is the restart policy's.
		s.logger.Debug("restart of the unhealthy plugin's task not needed", "error", err)
	}
	return true
}

// watch probes the registered plugin every HealthInterval until stopped;
// each change of health is a task event and a registry update. A plugin
// unhealthy at every probe for its health_timeout, counted from the first
// probe that found it so, is restarted; while unhealthy it is probed again
// at the latest when that time runs out, so a health_timeout shorter than
// HealthInterval is kept.
//
// An unhealthy plugin keeps its registry entry, marked unhealthy with the
// reason: that already takes it out of service (the plugin manager neither
// serves nor fingerprints through it, the registry prefers any healthy
// instance of the plugin ID, a storage adapter of the same ID included),
// and the servers show it unhealthy, and why, instead of missing, as Nomad
// keeps an unhealthy plugin in its dynamic registry. The restart's Stop
// hook deregisters it. When the task cannot be restarted (its runner gave
// no lifecycle) the plugin is still watched, so one that recovers is
// healthy again.
//
// Each probe has CallTimeout on the clock, in full even at the end of the
// health_timeout: a plugin that hangs while unhealthy is restarted at most
// CallTimeout late.
func (s *supervisor) watch() {
	healthy, reported := true, true
	var reason string
	var unhealthySince time.Time
	// timedOut: the plugin was unhealthy for its health_timeout and could
	// not be restarted; that is not reported again until it recovers.
	var timedOut bool
	wait := s.cfg.HealthInterval
	for {
		if !s.sleep(wait) {
			return
		}
		ctx, cancel := s.until(s.cfg.Clock.Now().Add(s.cfg.CallTimeout))
		ready, err := s.probe(ctx)
		cancel()
		if s.ctx.Err() != nil {
			return // stopping, not a health change
		}
		now := s.cfg.Clock.Now()
		was := healthy
		healthy = err == nil && ready
		switch {
		case err != nil:
			reason = err.Error()
		case !ready:
			reason = errNotReady.Error()
		default:
			reason = ""
		}
		if healthy != was {
			s.transition(healthy, reason)
			unhealthySince, timedOut = now, false
		}
		if healthy != reported {
			// Retried at the next probe when the registry refuses it.
			if err := s.cfg.Registry.SetHealth(s.info.Alloc.GetId(), s.pluginID(), healthy, reason); err != nil {
				s.logger.Error("recording the csi plugin's health", "healthy", healthy, "error", err)
			} else {
				reported = healthy
			}
		}
		wait = s.cfg.HealthInterval
		if !healthy && !timedOut {
			unhealthyFor := now.Sub(unhealthySince)
			if unhealthyFor >= s.p.healthTimeout {
				if s.restartUnhealthy(unhealthyFor, reason) {
					return
				}
				timedOut = true
				continue
			}
			wait = min(wait, s.p.healthTimeout-unhealthyFor)
		}
	}
}

// restartUnhealthy reports a plugin that stayed unhealthy for its health
// timeout after having been healthy, and restarts its attempt as a failure;
// it reports whether it asked for the restart.
func (s *supervisor) restartUnhealthy(unhealthyFor time.Duration, last string) bool {
	reason := fmt.Sprintf("CSI plugin %q was unhealthy for %s (health_timeout %s): %s", s.pluginID(), unhealthyFor, s.p.healthTimeout, last)
	s.logger.Warn("csi plugin unhealthy for its health timeout; restarting its task", "unhealthy_for", unhealthyFor,
		"health_timeout", s.p.healthTimeout, "reason", last)
	s.emit(EventPluginHealthTimeout, reason, map[string]string{
		"plugin_id": s.pluginID(), "health_timeout_ms": fmt.Sprint(s.p.healthTimeout.Milliseconds()),
		"unhealthy_for_ms": fmt.Sprint(unhealthyFor.Milliseconds()), "reason": last,
	})
	return s.restart(reason)
}

func (s *supervisor) transition(healthy bool, reason string) {
	details := map[string]string{"plugin_id": s.pluginID(), "plugin_type": s.p.plugin.GetType()}
	if healthy {
		s.logger.Info("csi plugin healthy again")
		s.emit(EventPluginHealthy, fmt.Sprintf("CSI %s plugin %q is healthy again", s.p.plugin.GetType(), s.pluginID()), details)
		return
	}
	details["reason"] = reason
	s.logger.Warn("csi plugin unhealthy", "reason", reason)
	s.emit(EventPluginUnhealthy, fmt.Sprintf("CSI %s plugin %q is unhealthy: %s", s.p.plugin.GetType(), s.pluginID(), reason), details)
}

func (s *supervisor) emit(typ, msg string, details map[string]string) {
	if s.info.Events == nil {
		return
	}
	s.info.Events.EmitEvent(&pb.TaskEvent{Type: typ, OccurredAt: s.cfg.Now().UnixNano(), Message: msg, Details: details})
}
