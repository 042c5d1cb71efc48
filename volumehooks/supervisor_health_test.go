package volumehooks

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

const csiNode = pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE

// healthRun is a registered plugin watched on a manual clock.
type healthRun struct {
	*env
	t     *testing.T
	clock *testutil.ManualClock
	p     *csifake.Plugin
}

// startWatched starts a plugin task whose plugin is healthy at once, on a
// manual clock with a 30s health interval, and waits until it is
// registered and its supervisor waits for the next probe, 30s on.
func startWatched(t *testing.T, healthTimeout time.Duration) *healthRun {
	return startWatchedWith(t, healthTimeout, nil, nil)
}

// startWatchedWith is startWatched with the supervisor's config changed by
// cfg and the task's info by info.
func startWatchedWith(t *testing.T, healthTimeout time.Duration, cfg func(*SupervisorConfig), info func(*runhooks.TaskInfo)) *healthRun {
	clock := testutil.NewManualClock()
	e := newEnv(t, pluginTask("node", healthTimeout), func(c *SupervisorConfig) {
		c.Clock, c.HealthInterval = clock, 30*time.Second
		if cfg != nil {
			cfg(c)
		}
	})
	if info != nil {
		info(&e.info)
	}
	r := &healthRun{env: e, t: t, clock: clock, p: csifake.New()}
	// Served between prestart (which removes a stale socket) and
	// poststart, so the first probe finds it without the clock moving.
	if _, err := e.prestart(false); err != nil {
		t.Fatal(err)
	}
	e.serve(r.p)
	if err := e.hook.Poststart(context.Background(), &runhooks.PoststartRequest{TaskInfo: e.info, TaskID: "attempt-1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.hook.stopSupervisor(context.Background()) })
	e.waitEntries("CSI_PLUGIN_TYPE_NODE hostpath " + allocID + " healthy=true needs_probe=false")
	r.waitIdle(r.p.Probe.Count(), 30*time.Second)
	return r
}

// restarted, as the next wait of waitIdle and advance: the supervisor asked
// for a restart and stopped.
const restarted = time.Duration(0)

// waitIdle waits until the plugin has had at least probes probes and the
// supervisor has decided on the last one: its only timer is the wait of
// next for the next probe, or, next being restarted, it asked for a
// restart and armed nothing. Timers are told apart by their deadlines, so
// one armed meanwhile (a call's deadline) is not taken for the wait.
func (r *healthRun) waitIdle(probes int, next time.Duration) {
	r.t.Helper()
	testutil.WaitFor(r.t, 10*time.Second, func() error {
		if n := r.p.Probe.Count(); n < probes {
			return fmt.Errorf("%d probes, want %d", n, probes)
		}
		at := r.clock.Deadlines()
		if next == restarted {
			if len(r.life.restarts()) == 0 || len(at) != 0 {
				return fmt.Errorf("no restart asked yet (timers at %v)", at)
			}
			return nil
		}
		if want := r.clock.Now().Add(next); len(at) != 1 || !at[0].Equal(want) {
			return fmt.Errorf("timers at %v, want only the next probe's at %v", at, want)
		}
		return nil
	})
}

// advance moves the clock by d, waits for the probe that comes due and
// for the supervisor to wait next for the following one (or restarted).
func (r *healthRun) advance(d, next time.Duration) {
	r.t.Helper()
	n := r.p.Probe.Count()
	r.clock.Advance(d)
	r.waitIdle(n+1, next)
}

func notReady() *csipb.ProbeResponse { return &csipb.ProbeResponse{Ready: wrapperspb.Bool(false)} }
func ready() *csipb.ProbeResponse    { return &csipb.ProbeResponse{Ready: wrapperspb.Bool(true)} }

// A plugin that was healthy and then stays unhealthy for its
// health_timeout is restarted through the task's lifecycle, as a failure
// (so the restart policy counts it), with an event naming the plugin and
// how long it was unhealthy. Until then it stays registered, marked
// unhealthy. A health_timeout shorter than the health interval is kept: the
// plugin is probed again when it runs out.
func TestPluginUnhealthyForItsHealthTimeoutIsRestarted(t *testing.T) {
	for _, tc := range []struct {
		healthTimeout time.Duration
		steps         []time.Duration // clock advances after the one that finds it unhealthy
		unhealthyFor  string
	}{
		{time.Minute, []time.Duration{30 * time.Second, 30 * time.Second}, "1m0s"},
		{10 * time.Second, []time.Duration{10 * time.Second}, "10s"},
	} {
		t.Run(tc.healthTimeout.String(), func(t *testing.T) {
			r := startWatched(t, tc.healthTimeout)
			r.p.Probe.Always(notReady(), nil)
			r.advance(30*time.Second, tc.steps[0])
			r.events.waitEvents(t, EventPluginUnhealthy, 1)
			r.waitEntries("CSI_PLUGIN_TYPE_NODE hostpath " + allocID + " healthy=false needs_probe=false")
			for i, d := range tc.steps {
				if n := len(r.life.restarts()); n != 0 {
					t.Fatalf("restarted before step %d, %s of unhealthiness short of health_timeout %s", i, tc.healthTimeout, tc.healthTimeout)
				}
				next := restarted
				if i+1 < len(tc.steps) {
					next = tc.steps[i+1]
				}
				r.advance(d, next)
			}
			got := r.life.restarts()
			want := fmt.Sprintf(`CSI plugin "hostpath" was unhealthy for %s (health_timeout %s): %s`, tc.unhealthyFor, tc.healthTimeout, errNotReady)
			if len(got) != 1 || got[0].taskID != "attempt-1" || !got[0].failure || got[0].reason != want {
				t.Fatalf("restarts %+v, want one failure restart of attempt-1 with reason %q", got, want)
			}
			evs := r.events.ofType(EventPluginHealthTimeout)
			if len(evs) != 1 || evs[0].GetMessage() != want || evs[0].GetDetails()["plugin_id"] != "hostpath" ||
				evs[0].GetDetails()["unhealthy_for_ms"] != fmt.Sprint(tc.healthTimeout.Milliseconds()) {
				t.Errorf("health timeout events %v, want one naming the plugin and how long it was unhealthy", evs)
			}
			if n := r.clock.Pending(); n != 0 {
				t.Errorf("%d timers armed after the restart request: the supervisor should have stopped", n)
			}
		})
	}
}

// Unhealthiness counts from the last time the plugin was seen healthy: a
// plugin that recovers in between starts its health_timeout afresh.
func TestPluginHealthyAgainStartsItsHealthTimeoutAfresh(t *testing.T) {
	r := startWatched(t, time.Minute)
	r.p.Probe.Always(notReady(), nil)
	r.advance(30*time.Second, 30*time.Second) // unhealthy since 0:30
	r.p.Probe.Always(ready(), nil)
	r.advance(30*time.Second, 30*time.Second) // healthy at 1:00
	r.events.waitEvents(t, EventPluginHealthy, 2)
	r.p.Probe.Always(notReady(), nil)
	r.advance(30*time.Second, 30*time.Second) // unhealthy since 1:30
	r.advance(30*time.Second, 30*time.Second) // for 30s
	if n := len(r.life.restarts()); n != 0 {
		t.Fatalf("%d restarts: the minute of unhealthiness was not continuous", n)
	}
	r.advance(30*time.Second, restarted) // for 1m
	if got := r.life.restarts(); len(got) != 1 || !strings.Contains(got[0].reason, "unhealthy for 1m0s") {
		t.Fatalf("restarts %+v, want one after a continuous minute", got)
	}
	if u := len(r.events.ofType(EventPluginUnhealthy)); u != 2 {
		t.Errorf("%d unhealthy events, want 2", u)
	}
}

// In a real task runner, a plugin that turns unhealthy after being healthy
// is restarted once its health_timeout has passed, as a failure the
// restart policy counts, and its next attempt is registered again.
func TestRunnerRestartsAPluginThatStaysUnhealthy(t *testing.T) {
	reg := registry.New(newMemStore())
	var mu sync.Mutex
	var plugins []*csifake.Plugin
	d := &pluginDriver{onStart: func(cfg *driverpb.TaskConfig) {
		path, err := csi.ParseEndpoint(cfg.GetEnv()[EnvEndpoint])
		if err != nil {
			t.Errorf("CSI_ENDPOINT %q: %v", cfg.GetEnv()[EnvEndpoint], err)
			return
		}
		p := csifake.New()
		srv, err := p.Listen(path)
		if err != nil {
			t.Errorf("serving the plugin at its CSI_ENDPOINT: %v", err)
			return
		}
		t.Cleanup(srv.Stop)
		mu.Lock()
		plugins = append(plugins, p)
		mu.Unlock()
	}}
	plugin := func(i int) *csifake.Plugin {
		mu.Lock()
		defer mu.Unlock()
		if i < len(plugins) {
			return plugins[i]
		}
		return nil
	}
	tr := runPluginTask(t, pluginTask("node", 100*time.Millisecond), d, reg, shortDir(t))
	healthy := func() error {
		e, ok := reg.Serving(csiNode, "hostpath")
		if !ok || !e.Registration.GetHealthy() {
			return fmt.Errorf("not registered healthy: %v", e.Registration)
		}
		return nil
	}
	testutil.WaitFor(t, 10*time.Second, healthy)
	plugin(0).Probe.Always(notReady(), nil)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if d.started() < 2 || plugin(1) == nil {
			return fmt.Errorf("%d starts: the unhealthy plugin was not restarted", d.started())
		}
		return healthy()
	})
	st := tr.State()
	if st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING || st.GetRestarts() != 1 {
		t.Errorf("state %v, want running after one restart", st)
	}
	var signaled bool
	for _, ev := range st.GetEvents() {
		if ev.GetType() == "Restart Signaled" {
			signaled = true
			if ev.GetDetails()["failure"] != "true" || !strings.Contains(ev.GetMessage(), `CSI plugin "hostpath" was unhealthy for `) {
				t.Errorf("restart event %v: want the supervisor's reason, as a failure", ev)
			}
		}
	}
	got := strings.Join(eventTypes(st), ", ")
	if !signaled || !strings.Contains(got, EventPluginUnhealthy+", "+EventPluginHealthTimeout+", Restart Signaled") {
		t.Errorf("events %q: want the plugin unhealthy, its health timeout, then the restart", got)
	}
}

// A task whose runner gave no lifecycle cannot be restarted: a plugin
// unhealthy for its health_timeout is reported once, and still watched, so
// when it recovers it is healthy again in the registry.
func TestPluginWithoutLifecycleIsStillWatched(t *testing.T) {
	r := startWatchedWith(t, time.Minute, nil, func(info *runhooks.TaskInfo) { info.Lifecycle = nil })
	r.p.Probe.Always(notReady(), nil)
	r.advance(30*time.Second, 30*time.Second) // unhealthy since 0:30
	r.advance(30*time.Second, 30*time.Second) // for 30s
	r.advance(30*time.Second, 30*time.Second) // for 1m: cannot be restarted
	if n := len(r.events.ofType(EventPluginHealthTimeout)); n != 1 {
		t.Fatalf("%d health timeout events, want 1", n)
	}
	r.advance(30*time.Second, 30*time.Second) // still unhealthy, not reported again
	if n := len(r.events.ofType(EventPluginHealthTimeout)); n != 1 {
		t.Errorf("%d health timeout events after another unhealthy probe, want still 1", n)
	}
	r.p.Probe.Always(ready(), nil)
	r.advance(30*time.Second, 30*time.Second)
	r.events.waitEvents(t, EventPluginHealthy, 2)
	r.waitEntries("CSI_PLUGIN_TYPE_NODE hostpath " + allocID + " healthy=true needs_probe=false")
	// Unhealthy for a health_timeout again is reported again.
	r.p.Probe.Always(notReady(), nil)
	r.advance(30*time.Second, 30*time.Second)
	r.advance(30*time.Second, 30*time.Second)
	r.advance(30*time.Second, 30*time.Second)
	if n := len(r.events.ofType(EventPluginHealthTimeout)); n != 2 {
		t.Errorf("%d health timeout events, want 2", n)
	}
}

// A registered plugin that hangs on Probe is cut at CallTimeout on the
// supervisor's clock (the CSI client's own wall-clock deadline, an hour
// here, is only a backstop) and found unhealthy.
func TestHungProbeAfterRegistrationIsCutOnTheClock(t *testing.T) {
	r := startWatchedWith(t, 2*time.Minute, func(c *SupervisorConfig) { c.CallTimeout = time.Hour }, nil)
	release := r.p.Probe.Block()
	defer release()
	n := r.p.Probe.Count()
	r.clock.Advance(30 * time.Second)
	testutil.WaitFor(t, 10*time.Second, func() error {
		at := r.clock.Deadlines()
		if want := r.clock.Now().Add(time.Hour); r.p.Probe.Count() <= n || len(at) != 1 || !at[0].Equal(want) {
			return fmt.Errorf("%d probes, timers at %v: want the hung probe's deadline at %v", r.p.Probe.Count(), at, want)
		}
		return nil
	})
	r.clock.Advance(time.Hour)
	r.events.waitEvents(t, EventPluginUnhealthy, 1)
	r.waitIdle(n+1, 30*time.Second)
}
