package taskdrivers

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/builtin/drivers/mock"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

func mountedTask(id string, driverConfig sdk.ConfigMap, mounts ...*driverpb.Mount) *driverpb.TaskConfig {
	return &driverpb.TaskConfig{Id: id, Name: "web", AllocId: "a1", DriverConfig: driverConfig, Mounts: mounts}
}

var csiMount = &driverpb.Mount{HostPath: "/var/lib/berth/csi/hostpath", TaskPath: "/csi",
	Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL}

// wantMountsRefused checks that StartTask refused a task for its mounts
// with a FailedPrecondition error naming the driver, the task and why, and
// that the task neither started nor had its handle persisted.
func wantMountsRefused(t *testing.T, e *env, d *Driver, cfg *driverpb.TaskConfig, err error, why string) {
	t.Helper()
	if !errors.Is(err, ErrMountsNotSupported) || errcode.Code(err) != codes.FailedPrecondition {
		t.Fatalf("StartTask with mounts on %s = %v (code %s), want ErrMountsNotSupported, FailedPrecondition", d.Name(), err, errcode.Code(err))
	}
	for _, want := range []string{`driver "` + d.Name() + `"`, `task "` + cfg.GetId() + `"`, `"/csi"`, why} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := d.InspectTask(ctxT(t), cfg.GetId()); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Errorf("refused task %s exists: InspectTask = %v", cfg.GetId(), err)
	}
	handles, err := e.db.TaskHandles()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range handles {
		if h.GetHandle().GetConfig().GetId() == cfg.GetId() {
			t.Errorf("refused task %s has a persisted handle", cfg.GetId())
		}
	}
}

// TestMountsReachDriversThatHonourThem: mock (API version 2, mount_volumes)
// gets exactly the task's mounts; raw_exec (no mount_volumes) refuses the
// task instead of running it without them.
func TestMountsReachDriversThatHonourThem(t *testing.T) {
	e := newEnv(t)
	m := e.newManager(e.catalog(rawExecEnabled), nil)
	e.start(m)

	d := driver(t, m, "mock")
	if ok, err := d.HonoursMounts(ctxT(t)); err != nil || !ok {
		t.Fatalf("mock HonoursMounts = %t, %v; want true", ok, err)
	}
	ro := &driverpb.Mount{HostPath: "/etc/ssl", TaskPath: "/etc/ssl", ReadOnly: true,
		Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK}
	cfg := mountedTask("mounted", nil, csiMount, ro)
	if _, err := d.StartTask(ctxT(t), cfg); err != nil {
		t.Fatalf("StartTask with mounts on mock: %v", err)
	}
	st, err := d.InspectTask(ctxT(t), cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	got, err := mock.Mounts(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !proto.Equal(got[0], csiMount) || !proto.Equal(got[1], ro) {
		t.Errorf("mock got mounts %v, want %v and %v", got, csiMount, ro)
	}

	raw := driver(t, m, "raw_exec")
	if ok, err := raw.HonoursMounts(ctxT(t)); err != nil || ok {
		t.Fatalf("raw_exec HonoursMounts = %t, %v; want false", ok, err)
	}
	cfg, _ = gatedTask(t, "raw-mounted", 0)
	cfg.Mounts = []*driverpb.Mount{csiMount}
	_, err = raw.StartTask(ctxT(t), cfg)
	wantMountsRefused(t, e, raw, cfg, err, "does not advertise the mount_volumes capability")
}

// TestOlderPluginRunsTasksButGetsNoMounts: a plugin that negotiated driver
// API version 1 keeps running tasks without mounts, and a task with mounts
// is refused even though its capabilities say mount_volumes (a version 1
// plugin could not know about propagation).
func TestOlderPluginRunsTasksButGetsNoMounts(t *testing.T) {
	e := newEnv(t)
	e.fake("old", "apiv1", "old")
	m := e.newManager(e.catalog(PluginConfig{Name: "old"}), nil)
	e.start(m)
	d := driver(t, m, "old")
	if v := pluginClient(t, m, "old").APIVersion(); v != 1 {
		t.Fatalf("old plugin negotiated API version %d, want 1", v)
	}
	caps, err := d.Capabilities(ctxT(t))
	if err != nil || !caps.GetMountVolumes() {
		t.Fatalf("old plugin capabilities %v, %v; the test needs one claiming mount_volumes", caps, err)
	}
	if ok, err := d.HonoursMounts(ctxT(t)); err != nil || ok {
		t.Fatalf("old plugin HonoursMounts = %t, %v; want false (API version 1)", ok, err)
	}

	plain := mountedTask("plain", sdk.ConfigMap{"run_for": sdk.StringValue("1ms"), "exit_code": sdk.IntValue(4)})
	if _, err := d.StartTask(ctxT(t), plain); err != nil {
		t.Fatalf("StartTask without mounts on the old plugin: %v", err)
	}
	if res, err := d.WaitTask(ctxT(t), "plain"); err != nil || res.GetExitCode() != 4 {
		t.Fatalf("WaitTask: %v, %v", res, err)
	}

	cfg := mountedTask("old-mounted", nil, csiMount)
	_, err = d.StartTask(ctxT(t), cfg)
	wantMountsRefused(t, e, d, cfg, err, "speaks driver API version 1, and mounts need version 2")
}

// pluginClient is the client of the driver's running plugin.
func pluginClient(t *testing.T, m *Manager, name string) *sdk.DriverClient {
	t.Helper()
	r := m.instances[name].sup.Current()
	if r == nil {
		t.Fatalf("driver %s has no running plugin", name)
	}
	return r.Val.client
}
