package volumehooks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/taskenv"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrSocketPathTooLong:  codes.FailedPrecondition,
		ErrInvalidPluginBlock: codes.InvalidArgument,
		ErrNotConfigured:      codes.FailedPrecondition,
	})
}

// Only tasks with a csi_plugin block get a supervisor.
func TestFactorySkipsTasksWithoutAPlugin(t *testing.T) {
	f := NewCSIPluginSupervisor(SupervisorConfig{DataDir: "/d", Registry: registry.New(newMemStore())})
	if h := f(runhooks.AllocInfo{Alloc: &pb.Allocation{Id: "a"}}, &pb.Task{Name: "web"}); h != nil {
		t.Fatalf("hook %v for a task without csi_plugin", h)
	}
	if h := f(runhooks.AllocInfo{Alloc: &pb.Allocation{Id: "a"}}, pluginTask("node", time.Second)); h == nil || h.Name() != "csi_plugin_supervisor" {
		t.Fatalf("hook %v for a plugin task", h)
	}
}

// pluginArgs is a plugin task's config as a job writes it.
var pluginArgs = sdk.ConfigMap{"command": sdk.StringValue("berth"), "args": sdk.ListValue(
	"builtin", "csi-hostpath", "--endpoint", "${CSI_ENDPOINT}", "--state", "${csi.mount_dir}/state",
	"--targets", "${csi.stage_publish_base_dir}")}

// interpolated is the driver config the task runner would send: the
// config interpolated with the env and vars the hooks built.
func interpolated(env, vars map[string]string) []string {
	cfg := taskenv.FromMaps(env, vars).ReplaceConfig(pluginArgs)
	return cfg["args"].GetListValue().GetValues()
}

// An unisolated driver (raw_exec) gets host paths: CSI_ENDPOINT is the
// host socket, ${csi.*} are the host directories, and no mounts.
func TestPrestartGivesAnUnisolatedTaskHostPaths(t *testing.T) {
	e := newEnv(t, pluginTask("monolith", time.Second), nil)
	resp, err := e.prestart(false)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(e.dataDir, "csi", "plugins", allocID+"-plugin", "csi.sock")
	stage := filepath.Join(e.dataDir, "csi", "volumes", "hostpath")
	if got := resp.Env[EnvEndpoint]; got != "unix://"+sock {
		t.Errorf("CSI_ENDPOINT %q, want unix://%s", got, sock)
	}
	if len(resp.Mounts) != 0 {
		t.Errorf("mounts %v for a driver that does not honour them", resp.Mounts)
	}
	args := interpolated(resp.Env, resp.Vars)
	want := []string{"builtin", "csi-hostpath", "--endpoint", "unix://" + sock, "--state", filepath.Dir(sock) + "/state", "--targets", stage}
	if !slices.Equal(args, want) {
		t.Errorf("interpolated args %q, want %q", args, want)
	}
	for _, d := range []string{filepath.Dir(sock), stage} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("%s not created: %v", d, err)
		}
	}
}

// An isolating driver gets the plugin dir and the staging base as
// bidirectional mounts, and task paths in CSI_ENDPOINT and ${csi.*}.
func TestPrestartGivesAnIsolatedTaskMounts(t *testing.T) {
	e := newEnv(t, pluginTask("node", time.Second), nil)
	e.info.Driver = mounts(true)
	resp, err := e.prestart(false)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Env[EnvEndpoint]; got != "unix:///csi/csi.sock" {
		t.Errorf("CSI_ENDPOINT %q, want unix:///csi/csi.sock", got)
	}
	bidi := driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL
	want := []*driverpb.Mount{
		{HostPath: PluginDir(e.dataDir, allocID, "plugin"), TaskPath: "/csi", Propagation: bidi},
		{HostPath: StagePublishDir(e.dataDir, "hostpath"), TaskPath: "/local/csi", Propagation: bidi},
	}
	if len(resp.Mounts) != len(want) {
		t.Fatalf("mounts %v, want %v", resp.Mounts, want)
	}
	for i := range want {
		if !proto.Equal(resp.Mounts[i], want[i]) {
			t.Errorf("mount %d: %v, want %v", i, resp.Mounts[i], want[i])
		}
	}
	args := interpolated(resp.Env, resp.Vars)
	wantArgs := []string{"builtin", "csi-hostpath", "--endpoint", "unix:///csi/csi.sock", "--state", "/csi/state", "--targets", "/local/csi"}
	if !slices.Equal(args, wantArgs) {
		t.Errorf("interpolated args %q, want %q", args, wantArgs)
	}
}

// A socket path a unix socket cannot hold is refused before the task
// starts, naming the path, its length, the limit and the longest data_dir
// (or mount_dir) that fits, as an unrecoverable error (the task fails at
// once, not after its restart delays); on the host (a long data_dir) and
// in an isolated task (a long mount_dir).
func TestSocketPathTooLong(t *testing.T) {
	e := newEnv(t, pluginTask("node", time.Second), nil)
	long := "/" + strings.Repeat("d", 60)
	e.dataDir = long
	e.build(pluginTask("node", time.Second), func(c *SupervisorConfig) { c.DataDir = long })
	_, err := e.prestart(false)
	sock := PluginSocket(long, allocID, "plugin")
	// 107 - (len(sock) - len(long)): the data_dir that would fit.
	fits := fmt.Sprintf("a data_dir of at most %d bytes", 107-(len(sock)-len(long)))
	if !errors.Is(err, ErrSocketPathTooLong) || !runhooks.IsUnrecoverable(err) || !strings.Contains(err.Error(), sock) ||
		!strings.Contains(err.Error(), fmt.Sprintf("is %d bytes", len(sock))) || !strings.Contains(err.Error(), "107") ||
		!strings.Contains(err.Error(), fits) {
		t.Fatalf("prestart with socket %s (%d bytes): %v; want an unrecoverable ErrSocketPathTooLong naming it, its length, the limit and %q",
			sock, len(sock), err, fits)
	}
	if _, statErr := os.Stat(long); !errors.Is(statErr, os.ErrNotExist) {
		t.Errorf("prestart created %s before refusing: %v", long, statErr)
	}

	task := pluginTask("node", time.Second)
	task.CsiPlugin.MountDir = "/" + strings.Repeat("m", 100)
	e2 := newEnv(t, task, nil)
	e2.info.Driver = mounts(true)
	_, err = e2.prestart(false)
	if !errors.Is(err, ErrSocketPathTooLong) || !runhooks.IsUnrecoverable(err) || !strings.Contains(err.Error(), task.CsiPlugin.MountDir+"/csi.sock") ||
		!strings.Contains(err.Error(), "a mount_dir of at most 98 bytes") {
		t.Fatalf("prestart with a %d-byte mount_dir: %v", len(task.CsiPlugin.MountDir), err)
	}
	// Under raw_exec the task's mount_dir is not used: no error.
	e2.info.Driver = mounts(false)
	if _, err := e2.prestart(false); err != nil {
		t.Fatalf("unisolated prestart with a long mount_dir: %v", err)
	}
}

// A client that built the hook without its registry or with a relative
// data dir cannot run plugins.
func TestPrestartOfAnUnconfiguredSupervisor(t *testing.T) {
	e := newEnv(t, pluginTask("node", time.Second), nil)
	e.build(pluginTask("node", time.Second), func(c *SupervisorConfig) { c.Registry = nil })
	if _, err := e.prestart(false); !errors.Is(err, ErrNotConfigured) || !runhooks.IsUnrecoverable(err) {
		t.Fatalf("prestart without a registry: %v, want an unrecoverable ErrNotConfigured", err)
	}
	e.build(pluginTask("node", time.Second), func(c *SupervisorConfig) { c.DataDir = "data" })
	if _, err := e.prestart(false); !errors.Is(err, ErrNotConfigured) || !strings.Contains(err.Error(), `"data"`) {
		t.Fatalf("prestart with a relative data dir: %v, want ErrNotConfigured naming it", err)
	}
}

// A block the job validation should have refused is refused here too.
func TestPrestartRefusesAnInvalidBlock(t *testing.T) {
	for _, c := range []struct {
		name   string
		modify func(*pb.CSIPluginConfig)
		want   string
	}{
		{"unknown type", func(p *pb.CSIPluginConfig) { p.Type = "nodes" }, `"nodes"`},
		{"no id", func(p *pb.CSIPluginConfig) { p.Id = "" }, "has no id"},
		{"id climbing out of the data dir", func(p *pb.CSIPluginConfig) { p.Id = "../../etc" }, `"../../etc"`},
		{"relative mount_dir", func(p *pb.CSIPluginConfig) { p.MountDir = "csi" }, `mount_dir "csi"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			task := pluginTask("node", time.Second)
			c.modify(task.CsiPlugin)
			e := newEnv(t, task, nil)
			if _, err := e.prestart(false); !errors.Is(err, ErrInvalidPluginBlock) || !runhooks.IsUnrecoverable(err) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("prestart: %v, want an unrecoverable ErrInvalidPluginBlock naming %s", err, c.want)
			}
		})
	}
}

// A plugin that becomes ready is registered healthy with its provider,
// the alloc's create index and where it sees its staging base, with a
// "Plugin became healthy" event.
func TestReadyPluginIsRegistered(t *testing.T) {
	e := newEnv(t, pluginTask("monolith", time.Minute), nil)
	p := csifake.New()
	p.Probe.Next(&csipb.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil)
	e.start("attempt-1", false)
	e.serve(p)
	e.waitEntries(
		"CSI_PLUGIN_TYPE_CONTROLLER hostpath "+allocID+" healthy=true needs_probe=false",
		"CSI_PLUGIN_TYPE_NODE hostpath "+allocID+" healthy=true needs_probe=false")
	en, _ := e.reg.Serving(pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, "hostpath")
	r := en.Registration
	if r.GetProvider() != csifake.Name || r.GetProviderVersion() != csifake.VendorVersion || r.GetAllocCreateIndex() != 42 ||
		r.GetEndpoint() != "unix://"+PluginSocket(e.dataDir, allocID, "plugin") || r.GetStagePublishDir() != StagePublishDir(e.dataDir, "hostpath") {
		t.Errorf("registration %v", r)
	}
	ev := e.events.waitEvents(t, EventPluginHealthy, 1)[0]
	if ev.GetDetails()["provider"] != csifake.Name || !strings.Contains(ev.GetMessage(), `"hostpath"`) {
		t.Errorf("event %v", ev)
	}
	if p.Probe.Count() < 2 {
		t.Errorf("probes %d: the not-ready answer should have been followed by another probe", p.Probe.Count())
	}
	if n := len(e.life.restarts()); n != 0 {
		t.Errorf("%d restarts of a healthy plugin", n)
	}
}

// Healthy → unhealthy → healthy: each transition is one task event with
// its reason, and the registry entry follows.
func TestHealthTransitions(t *testing.T) {
	e := newEnv(t, pluginTask("node", time.Minute), nil)
	p := csifake.New()
	e.start("attempt-1", false)
	e.serve(p)
	e.waitEntries("CSI_PLUGIN_TYPE_NODE hostpath " + allocID + " healthy=true needs_probe=false")

	p.Probe.Always(nil, status.Error(codes.FailedPrecondition, "backing store offline"))
	ev := e.events.waitEvents(t, EventPluginUnhealthy, 1)[0]
	if !strings.Contains(ev.GetDetails()["reason"], "backing store offline") {
		t.Errorf("unhealthy event %v: want the probe's error as reason", ev)
	}
	e.waitEntries("CSI_PLUGIN_TYPE_NODE hostpath " + allocID + " healthy=false needs_probe=false")
	en, _ := e.reg.Serving(pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, "hostpath")
	if !strings.Contains(en.Registration.GetHealthDescription(), "backing store offline") {
		t.Errorf("health description %q", en.Registration.GetHealthDescription())
	}

	p.Probe.Always(&csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil)
	e.events.waitEvents(t, EventPluginHealthy, 2)
	e.waitEntries("CSI_PLUGIN_TYPE_NODE hostpath " + allocID + " healthy=true needs_probe=false")
	// Each transition once, however many probes ran.
	if u, h := len(e.events.ofType(EventPluginUnhealthy)), len(e.events.ofType(EventPluginHealthy)); u != 1 || h != 2 {
		t.Errorf("%d unhealthy and %d healthy events, want 1 and 2: %v", u, h, e.events.all())
	}
}

// A plugin that dies (its socket goes away) is reported unhealthy, and
// seen healthy again once it is back: a restarted plugin is not kept
// waiting by gRPC's reconnect backoff.
func TestPluginProcessRestart(t *testing.T) {
	e := newEnv(t, pluginTask("node", time.Minute), nil)
	p := csifake.New()
	e.start("attempt-1", false)
	srv := e.serve(p)
	e.events.waitEvents(t, EventPluginHealthy, 1)
	srv.Stop()
	e.events.waitEvents(t, EventPluginUnhealthy, 1)
	e.serve(p)
	e.events.waitEvents(t, EventPluginHealthy, 2)
	e.waitEntries("CSI_PLUGIN_TYPE_NODE hostpath " + allocID + " healthy=true needs_probe=false")
}

// A plugin never ready within health_timeout: a "Plugin health timeout"
// event and one restart of that attempt, as a failure; nothing registered.
func TestNeverHealthyRestartsTheTask(t *testing.T) {
	e := newEnv(t, pluginTask("node", 150*time.Millisecond), nil)
	p := csifake.New()
	p.Probe.Always(&csipb.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil)
	e.start("attempt-1", false)
	e.serve(p)
	ev := e.events.waitEvents(t, EventPluginHealthTimeout, 1)[0]
	if ev.GetDetails()["health_timeout_ms"] != "150" || !strings.Contains(ev.GetMessage(), "ready = false") {
		t.Errorf("event %v", ev)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if len(e.life.restarts()) == 0 {
			return errors.New("no restart requested")
		}
		return nil
	})
	got := e.life.restarts()
	if len(got) != 1 || got[0].taskID != "attempt-1" || !got[0].failure || !strings.Contains(got[0].reason, "did not become healthy within 150ms") {
		t.Fatalf("restarts %+v, want one failure restart of attempt-1", got)
	}
	if es := e.entries(); len(es) != 0 {
		t.Errorf("registry %q for a plugin never healthy", es)
	}
	if p.Probe.Count() < 2 {
		t.Errorf("%d probes: want the fast cadence to have probed again", p.Probe.Count())
	}
}

// A plugin that hangs on Probe: its task is restarted at health_timeout,
// not after the call's own deadline.
func TestHungProbeIsRestartedOnTime(t *testing.T) {
	e := newEnv(t, pluginTask("node", 200*time.Millisecond), func(c *SupervisorConfig) { c.CallTimeout = time.Hour })
	p := csifake.New()
	release := p.Probe.Block()
	defer release()
	e.start("attempt-1", false)
	e.serve(p)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if len(e.life.restarts()) != 1 {
			return errors.New("no restart of the hung plugin's task")
		}
		return nil
	})
	if p.Probe.Count() == 0 {
		t.Fatal("the plugin was never probed: the test did not exercise a hung call")
	}
	e.events.waitEvents(t, EventPluginHealthTimeout, 1)
}

// Stopping the task while its plugin hangs on Probe does not wait for the
// call, whose own deadline is an hour away.
func TestHungProbeNeverHangsStop(t *testing.T) {
	e := newEnv(t, pluginTask("node", time.Hour), func(c *SupervisorConfig) { c.CallTimeout = time.Hour })
	p := csifake.New()
	release := p.Probe.Block()
	defer release()
	e.start("attempt-1", false)
	e.serve(p)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if p.Probe.Count() < 1 {
			return errors.New("probe not in flight")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.hook.Stop(ctx, nil); err != nil {
		t.Fatalf("Stop with a Probe hung: %v", err)
	}
	if n := len(e.life.restarts()); n != 0 {
		t.Errorf("%d restarts requested by a stopped supervisor", n)
	}
}

// Killing the task, its end for good (finished) and the alloc's destroy
// deregister the plugin; deregistering twice is fine.
func TestStopAndExitDeregister(t *testing.T) {
	for _, phase := range []string{"stop", "finished", "destroy"} {
		t.Run(phase, func(t *testing.T) {
			e := newEnv(t, pluginTask("monolith", time.Minute), nil)
			e.start("attempt-1", false)
			e.serve(csifake.New())
			e.waitEntries(
				"CSI_PLUGIN_TYPE_CONTROLLER hostpath "+allocID+" healthy=true needs_probe=false",
				"CSI_PLUGIN_TYPE_NODE hostpath "+allocID+" healthy=true needs_probe=false")
			ctx := context.Background()
			var err error
			switch phase {
			case "stop":
				err = e.hook.Stop(ctx, &runhooks.StopRequest{TaskInfo: e.info, Reason: "alloc stopped by the servers"})
			case "finished":
				if err = e.hook.Exited(ctx, nil); err == nil {
					err = e.hook.Finished(ctx, &runhooks.FinishedRequest{TaskInfo: e.info})
				}
			case "destroy":
				err = e.hook.Destroy(ctx, &runhooks.TaskDestroyRequest{TaskInfo: e.info})
			}
			if err != nil {
				t.Fatal(err)
			}
			if es := e.entries(); len(es) != 0 {
				t.Fatalf("registry after %s: %q", phase, es)
			}
			// A stopping task may still serve its socket; an exited one does
			// not, and a destroyed alloc leaves no plugin directory.
			socket, dir := PluginSocket(e.dataDir, allocID, "plugin"), PluginDir(e.dataDir, allocID, "plugin")
			_, sockErr := os.Stat(socket)
			_, dirErr := os.Stat(dir)
			switch {
			case phase == "stop" && sockErr != nil:
				t.Errorf("socket after stop: %v", sockErr)
			case phase != "stop" && !errors.Is(sockErr, fs.ErrNotExist):
				t.Errorf("socket %s after %s: %v, want it removed", socket, phase, sockErr)
			case phase == "destroy" && !errors.Is(dirErr, fs.ErrNotExist):
				t.Errorf("plugin dir %s after destroy: %v, want it removed", dir, dirErr)
			case phase != "destroy" && dirErr != nil:
				t.Errorf("plugin dir after %s: %v", phase, dirErr)
			}
			if err := e.hook.Exited(ctx, nil); err != nil {
				t.Fatalf("exited after the teardown: %v", err)
			}
			if err := e.hook.Finished(ctx, &runhooks.FinishedRequest{TaskInfo: e.info}); err != nil {
				t.Fatalf("second teardown: %v", err)
			}
		})
	}
}

// A restart (asked for, or after an exit the restart policy decides on)
// keeps the plugin's entries, unhealthy and saying why, until the next
// attempt registers it again: the plugin ID stays the task plugin's on the
// node, so a storage adapter of the same ID is never reported in its
// place (csi/pluginmanager TestTaskPluginReplacesAdapterOfTheSameID).
func TestRestartKeepsThePluginRegisteredUnhealthy(t *testing.T) {
	for _, phase := range []string{"restart", "exited"} {
		t.Run(phase, func(t *testing.T) {
			e := newEnv(t, pluginTask("monolith", time.Minute), nil)
			e.start("attempt-1", false)
			e.serve(csifake.New())
			e.waitEntries(
				"CSI_PLUGIN_TYPE_CONTROLLER hostpath "+allocID+" healthy=true needs_probe=false",
				"CSI_PLUGIN_TYPE_NODE hostpath "+allocID+" healthy=true needs_probe=false")
			ctx := context.Background()
			var err error
			want := "the plugin task exited"
			switch phase {
			case "restart":
				err = e.hook.Stop(ctx, &runhooks.StopRequest{TaskInfo: e.info, Reason: "unhealthy for 1m", Restart: true})
				want = "restarting: unhealthy for 1m"
			case "exited":
				err = e.hook.Exited(ctx, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			e.waitEntries(
				"CSI_PLUGIN_TYPE_CONTROLLER hostpath "+allocID+" healthy=false needs_probe=false",
				"CSI_PLUGIN_TYPE_NODE hostpath "+allocID+" healthy=false needs_probe=false")
			for _, en := range e.reg.List(pb.CSIPluginType_CSI_PLUGIN_TYPE_UNSPECIFIED) {
				if d := en.Registration.GetHealthDescription(); d != want {
					t.Errorf("entry %s: description %q, want %q", en.Registration.GetType(), d, want)
				}
			}
			// The next attempt registers it healthy again.
			e.start("attempt-2", false)
			e.serve(csifake.New())
			e.waitEntries(
				"CSI_PLUGIN_TYPE_CONTROLLER hostpath "+allocID+" healthy=true needs_probe=false",
				"CSI_PLUGIN_TYPE_NODE hostpath "+allocID+" healthy=true needs_probe=false")
		})
	}
}

// After a client restart the registry holds the plugin's entry with
// NeedsProbe; the recovered task's supervisor probes the live plugin (its
// socket is left alone) and registers it again.
func TestRecoveredTaskReRegisters(t *testing.T) {
	dataDir := shortDir(t)
	stored := &pb.CSIPluginRegistration{Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, PluginId: "hostpath", AllocId: allocID,
		Endpoint: "unix://" + PluginSocket(dataDir, allocID, "plugin"), Provider: "old", ProviderVersion: "0.1", Healthy: true, RegisteredAt: 1}
	reg := registry.New(newMemStore(stored))
	if _, err := reg.Restore(func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dataDir: dataDir, reg: reg, events: &eventLog{}, life: &fakeLifecycle{}}
	e.build(pluginTask("node", time.Minute), nil)
	if got := e.entries(); len(got) != 1 || !strings.HasSuffix(got[0], "needs_probe=true") {
		t.Fatalf("restored registry %q", got)
	}
	p := csifake.New()
	e.serve(p)
	e.start("attempt-old", true)
	e.waitEntries("CSI_PLUGIN_TYPE_NODE hostpath " + allocID + " healthy=true needs_probe=false")
	en, _ := reg.Serving(pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, "hostpath")
	if en.Registration.GetProvider() != csifake.Name {
		t.Errorf("re-registered provider %q, want the plugin's answer %q", en.Registration.GetProvider(), csifake.Name)
	}
	if ev := e.events.waitEvents(t, EventPluginHealthy, 1)[0]; !strings.Contains(ev.GetMessage(), "after a client restart") {
		t.Errorf("event %v", ev)
	}
	if _, err := os.Stat(PluginSocket(dataDir, allocID, "plugin")); err != nil {
		t.Errorf("the recovered plugin's socket: %v", err)
	}
}

// A fresh attempt removes the previous attempt's socket file, which
// would answer nothing.
func TestPrestartRemovesAStaleSocket(t *testing.T) {
	e := newEnv(t, pluginTask("node", time.Minute), nil)
	sock := PluginSocket(e.dataDir, allocID, "plugin")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.prestart(false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale socket still there: %v", err)
	}
}

// A task whose runner gave no lifecycle cannot be restarted: a plugin not
// healthy within its health_timeout is reported once and still probed, and
// registered as soon as it becomes ready.
func TestPluginWithoutLifecycleNotHealthyInTimeIsStillRegistered(t *testing.T) {
	e := newEnv(t, pluginTask("node", 100*time.Millisecond), nil)
	e.info.Lifecycle = nil
	p := csifake.New()
	p.Probe.Always(&csipb.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil)
	e.start("attempt-1", false)
	e.serve(p)
	e.events.waitEvents(t, EventPluginHealthTimeout, 1)
	p.Probe.Always(&csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil)
	e.waitEntries("CSI_PLUGIN_TYPE_NODE hostpath " + allocID + " healthy=true needs_probe=false")
	if n := len(e.events.ofType(EventPluginHealthTimeout)); n != 1 {
		t.Errorf("%d health timeout events, want 1", n)
	}
}
