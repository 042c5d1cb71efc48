package adapters

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi"
)

func TestAdapterServesCSIOverGoPlugin(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	m := e.newManager(e.catalog(""), nil)
	next := events(t, m, "hostpath")
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	started := expect(t, next, EventStarted, EventStartFailed)
	expect(t, next, EventHealthy, EventUnhealthy, EventExited)
	h := mustHandle(t, m, "hostpath")
	st := waitHealthy(t, h)
	if st.Pid != started.Pid || st.Pid <= 0 || st.APIVersion != 1 || st.Restarts != 0 || !st.Running {
		t.Errorf("state %+v after start event %+v", st, started)
	}
	checkCSI(ctx, t, h, "node-1")

	// The CSI client library works over the handle's connection as over a
	// socket's.
	fp, err := csi.New(h.Conn()).Fingerprint(ctx)
	if err != nil {
		t.Fatalf("csi fingerprint: %v", err)
	}
	if fp.Info.Name != "hostpath.csi.berth.dev" {
		t.Errorf("fingerprint: %+v", fp)
	}
	// The adapter keeps its state in its data dir under the client's.
	if _, err := os.Stat(filepath.Join(DataDir(e.dataDir, "hostpath"), "state")); err != nil {
		t.Errorf("adapter state dir: %v", err)
	}
	recs, err := e.db.StorageAdapters()
	if err != nil || len(recs) != 1 || recs[0].GetReattach().GetPid() != int64(st.Pid) {
		t.Fatalf("persisted records %v, %v; want one for pid %d", recs, err, st.Pid)
	}
	if _, err := m.Adapter("nfs"); !errors.Is(err, ErrUnknownAdapter) {
		t.Errorf("Adapter(nfs) = %v, want ErrUnknownAdapter", err)
	}

	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, st.Pid)
	if recs, _ := e.db.StorageAdapters(); len(recs) != 0 {
		t.Errorf("records after shutdown: %v", recs)
	}
	_, err = csipb.NewIdentityClient(h.Conn()).Probe(ctx, &csipb.ProbeRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("call after shutdown = %v, want Unavailable", err)
	}
}

// TestKilledAdapterIsRestarted: kill -9 of the adapter process; the
// manager restarts it and the same handle's calls reach the new process.
func TestKilledAdapterIsRestarted(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	m := e.newManager(e.catalog(""), nil)
	next := events(t, m, "hostpath")
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h := mustHandle(t, m, "hostpath")
	first := waitHealthy(t, h)
	expect(t, next, EventHealthy)

	if err := syscall.Kill(first.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exited := expect(t, next, EventExited, EventStarted)
	if exited.Pid != first.Pid || exited.Delay <= 0 {
		t.Errorf("exit event %+v, want pid %d and a restart delay", exited, first.Pid)
	}
	restarted := expect(t, next, EventStarted)
	expect(t, next, EventHealthy, EventExited)
	if restarted.Pid == first.Pid || restarted.Pid <= 0 {
		t.Fatalf("restarted as pid %d, first was %d", restarted.Pid, first.Pid)
	}
	st := waitHealthy(t, h)
	if st.Pid != restarted.Pid || st.Restarts != 1 {
		t.Errorf("state after restart %+v, want pid %d and 1 restart", st, restarted.Pid)
	}
	checkCSI(ctx, t, h, "node-1")
	recs, err := e.db.StorageAdapters()
	if err != nil || len(recs) != 1 || recs[0].GetReattach().GetPid() != int64(restarted.Pid) {
		t.Errorf("persisted records %v, %v; want one for pid %d", recs, err, restarted.Pid)
	}
}

// TestCallWaitsForTheRestartedAdapter: a call made while the adapter is
// down waits for the restart instead of failing.
func TestCallWaitsForTheRestartedAdapter(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	m := e.newManager(e.catalog(""), func(c *Config) {
		c.Backoff.Initial, c.Backoff.Max = 300*time.Millisecond, 300*time.Millisecond
	})
	next := events(t, m, "hostpath")
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h := mustHandle(t, m, "hostpath")
	first := waitHealthy(t, h)
	if err := syscall.Kill(first.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	expect(t, next, EventExited)
	// Down for 300ms now: the call waits for the next process.
	if _, err := csipb.NewIdentityClient(h.Conn()).GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{}); err != nil {
		t.Fatalf("call during the restart: %v", err)
	}
	if st := h.State(); st.Pid == first.Pid || !st.Running {
		t.Errorf("call answered by %+v, first pid %d", st, first.Pid)
	}
	// With a deadline shorter than the restart it fails Unavailable.
	if err := syscall.Kill(h.State().Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	expect(t, next, EventExited)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := csipb.NewIdentityClient(h.Conn()).Probe(short, &csipb.ProbeRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("call with a deadline before the restart = %v, want Unavailable", err)
	}
}

// TestClientRestartReattaches: a client that crashes leaves its adapter
// running; the next manager on the same state DB reattaches to it rather
// than start another.
func TestClientRestartReattaches(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	m1 := e.newManager(e.catalog(""), nil)
	if err := m1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	first := waitHealthy(t, mustHandle(t, m1, "hostpath"))
	m1.abandon()
	if !alive(first.Pid) {
		t.Fatal("abandoning the manager stopped the adapter")
	}

	m2 := e.newManager(e.catalog(""), nil)
	next := events(t, m2, "hostpath")
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, next, EventReattached, EventStarted)
	if ev.Pid != first.Pid {
		t.Fatalf("reattached to pid %d, want %d", ev.Pid, first.Pid)
	}
	h := mustHandle(t, m2, "hostpath")
	if st := waitHealthy(t, h); st.Pid != first.Pid || st.Restarts != 0 {
		t.Errorf("state after reattach %+v, want pid %d", st, first.Pid)
	}
	checkCSI(ctx, t, h, "node-1")

	// The reattached process is supervised like a started one.
	if err := syscall.Kill(first.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	expect(t, next, EventExited)
	again := expect(t, next, EventStarted)
	if again.Pid == first.Pid {
		t.Fatal("not restarted after the reattached process died")
	}
	checkCSI(ctx, t, h, "node-1")
	if err := m2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, again.Pid)
}

// TestClientRestartReplacesAdapterWithChangedConfig: a process started
// with another config is not reattached.
func TestClientRestartReplacesAdapterWithChangedConfig(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	m1 := e.newManager(e.catalog(""), nil)
	if err := m1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	first := waitHealthy(t, mustHandle(t, m1, "hostpath"))
	m1.abandon()

	m2 := e.newManager(e.catalog("", PluginConfig{Name: "hostpath", JSON: []byte(`{"max_volumes": 4}`), Source: "agent.hcl:3"}), nil)
	next := events(t, m2, "hostpath")
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, next, EventStarted, EventReattached)
	if ev.Pid == first.Pid {
		t.Fatal("reattached to a process started with another config")
	}
	waitGone(t, first.Pid)
	ni, err := csipb.NewNodeClient(mustHandle(t, m2, "hostpath").Conn()).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil || ni.GetMaxVolumesPerNode() != 4 {
		t.Errorf("NodeGetInfo = %v, %v; want max volumes 4 from the new config", ni, err)
	}
}

// TestInvalidConfigFailsForGood: a built-in adapter's bad config stops
// Start, naming the block, and calls fail FailedPrecondition.
func TestInvalidConfigFailsForGood(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	cat := e.catalog("", PluginConfig{Name: "hostpath", JSON: []byte(`{"capacityy": "1G"}`), Source: "agent.hcl:7"})
	m := e.newManager(cat, nil)
	err := m.Start(ctx)
	var ae *AdapterError
	if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ae) || ae.Source != "agent.hcl:7" {
		t.Fatalf("Start = %v, want ErrInvalidConfig from agent.hcl:7", err)
	}
	h := mustHandle(t, m, "hostpath")
	if st := h.State(); !st.Failed || st.Running {
		t.Errorf("state %+v, want failed", st)
	}
	_, err = csipb.NewIdentityClient(h.Conn()).Probe(ctx, &csipb.ProbeRequest{})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("call to a failed adapter = %v, want FailedPrecondition", err)
	}
}

// TestMissingAdapterIsRetried: a configured adapter that is nowhere is
// reported and retried, and found once installed.
func TestMissingAdapterIsRetried(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	pluginDir := t.TempDir()
	cat := e.catalog(pluginDir, PluginConfig{Name: "tmpdir", Source: "agent.hcl:9"})
	m := e.newManager(cat, nil)
	next := events(t, m, "tmpdir")
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, next, EventStartFailed)
	if ev.Delay <= 0 || !contains(ev.Reason, "not found") || !contains(ev.Reason, "agent.hcl:9") {
		t.Errorf("start failure %+v", ev)
	}
	// Installing it fixes it, without an agent restart.
	writeWrapper(t, pluginDir, "tmpdir", "tmpdir")
	expect(t, next, EventStarted)
	expect(t, next, EventHealthy, EventExited)
	info, err := csipb.NewIdentityClient(mustHandle(t, m, "tmpdir").Conn()).GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil || info.GetName() != "fake.csi.berth.dev" {
		t.Fatalf("GetPluginInfo of the installed adapter = %v, %v", info, err)
	}
}

// TestNotReadyAdapterIsProbedFast: an adapter whose Probe says "not ready"
// is unhealthy (an event with the reason), probed again at the fast start
// cadence rather than the health interval, and healthy once it is ready.
func TestNotReadyAdapterIsProbedFast(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	pluginDir := t.TempDir()
	writeWrapper(t, pluginDir, "slow", "slow")
	cat := e.catalog(pluginDir, PluginConfig{Name: "slow", JSON: []byte(`{"ready_after": 3}`), Source: "agent.hcl:1"})
	m := e.newManager(cat, func(c *Config) { c.HealthInterval = time.Hour })
	next := events(t, m, "slow")
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, next, EventStarted)
	un := expect(t, next, EventUnhealthy, EventHealthy)
	if !contains(un.Reason, "not ready") {
		t.Errorf("unhealthy reason %q", un.Reason)
	}
	// With an hour between health probes, only the fast cadence can get
	// here: 3 probes "not ready", the fourth ready.
	expect(t, next, EventHealthy, EventExited)
	if st := mustHandle(t, m, "slow").State(); !st.Healthy || st.Reason != "" {
		t.Errorf("state %+v", st)
	}
}
