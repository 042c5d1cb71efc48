package sdk

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/sdk/driverpb"
)

func mount(host, task string, prop driverpb.MountPropagation) *driverpb.Mount {
	return &driverpb.Mount{HostPath: host, TaskPath: task, Propagation: prop}
}

func TestValidMountsPass(t *testing.T) {
	cfg := &driverpb.TaskConfig{Id: "t1", Mounts: []*driverpb.Mount{
		mount("/srv/data", "/data", driverpb.MountPropagation_MOUNT_PROPAGATION_UNSPECIFIED),
		mount("/srv/data", "/data2", driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE),
		mount("/var/lib/plugins/csi", "/csi", driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL),
		{HostPath: "/etc/ssl", TaskPath: "/etc/ssl/", ReadOnly: true, Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK},
	}}
	if err := ValidateTaskConfig("p", cfg); err != nil {
		t.Fatalf("valid mounts refused: %v", err)
	}
}

func TestInvalidMountsNameIndexAndTaskPath(t *testing.T) {
	good := mount("/srv/a", "/a", driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE)
	for _, tc := range []struct {
		name  string
		bad   *driverpb.Mount
		want  string // in the problem
		index string
	}{
		{"relative host path", mount("srv/a", "/b", 0), `host_path "srv/a" is not an absolute path`, "mounts[1]"},
		{"empty host path", mount("", "/b", 0), "host_path is required", "mounts[1]"},
		{"dotdot host path", mount("/srv/../etc", "/b", 0), `host_path "/srv/../etc" contains a ".." element`, "mounts[1]"},
		{"relative task path", mount("/srv/b", "b", 0), "task_path is not an absolute path", "mounts[1]"},
		{"empty task path", mount("/srv/b", "", 0), "task_path is required", "mounts[1]"},
		{"task path escapes", mount("/srv/b", "/../../etc", 0), `task_path contains a ".." element`, "mounts[1]"},
		{"task root", mount("/srv/b", "//", 0), "must not be the task's root", "mounts[1]"},
		{"duplicate task path", mount("/srv/b", "/a/", 0), "also the task path of mounts[0]", "mounts[1]"},
		{"NUL in host path", mount("/srv/a\x00/etc", "/b", 0), `host_path "/srv/a\x00/etc" contains a NUL byte`, "mounts[1]"},
		{"NUL in task path", mount("/srv/b", "/b\x00c", 0), "task_path contains a NUL byte", "mounts[1]"},
		{"unknown propagation", mount("/srv/b", "/b", 42), "unknown propagation 42", "mounts[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &driverpb.TaskConfig{Id: "t1", Mounts: []*driverpb.Mount{good, tc.bad}}
			err := ValidateTaskConfig("p", cfg)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("ValidateTaskConfig = %v, want ErrInvalidConfig", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Key != tc.index || ce.Scope != ScopeTask || ce.Plugin != "p" {
				t.Fatalf("error %v: ConfigError %+v, want key %q in scope %q", err, ce, tc.index, ScopeTask)
			}
			if !strings.Contains(ce.Problem, tc.want) || !strings.Contains(ce.Problem, "task path "+quote(tc.bad.GetTaskPath())) {
				t.Errorf("problem %q does not say %q and name task path %q", ce.Problem, tc.want, tc.bad.GetTaskPath())
			}
		})
	}
}

func quote(s string) string { return strconv.Quote(s) }

func TestMountsSupportedNeedsVersionAndCapability(t *testing.T) {
	with := &driverpb.DriverCapabilities{MountVolumes: true}
	for _, tc := range []struct {
		version uint32
		caps    *driverpb.DriverCapabilities
		want    bool
	}{
		{APIVersionMounts, with, true},
		{APIVersion, with, true},
		// A version 1 plugin could not know about propagation.
		{1, with, false},
		{APIVersion, &driverpb.DriverCapabilities{}, false},
		{APIVersion, nil, false},
	} {
		if got := MountsSupported(tc.version, tc.caps); got != tc.want {
			t.Errorf("MountsSupported(%d, %v) = %v, want %v", tc.version, tc.caps, got, tc.want)
		}
	}
}

// TestServerRefusesMountsTheDriverDoesNotHonour: a client other than berth
// cannot get mounts past a driver that would ignore them; invalid mounts
// arrive as InvalidArgument.
func TestServerRefusesMountsTheDriverDoesNotHonour(t *testing.T) {
	f := newFakeDriver()
	c, _ := serve(t, f)
	cmd := ConfigMap{"command": StringValue("x")}
	cfg := &driverpb.TaskConfig{Id: "m1", DriverConfig: cmd, Mounts: []*driverpb.Mount{mount("/srv/a", "/a", 0)}}
	_, err := c.StartTask(testCtx(t), cfg)
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), `task "m1"`) {
		t.Errorf("StartTask with mounts on a driver without mount_volumes = %v, want ErrNotSupported naming the task", err)
	}
	f.mu.Lock()
	if f.Starts != 0 {
		t.Errorf("the driver's StartTask was called %d times", f.Starts)
	}
	f.mu.Unlock()

	f.mu.Lock()
	f.MountVolumes = true
	f.mu.Unlock()
	if _, err := c.StartTask(testCtx(t), cfg); err != nil {
		t.Fatalf("StartTask with mounts on a driver with mount_volumes: %v", err)
	}
	cfg = &driverpb.TaskConfig{Id: "m2", DriverConfig: cmd, Mounts: []*driverpb.Mount{mount("/srv/a", "rel", 0)}}
	_, err = c.StartTask(testCtx(t), cfg)
	var rpcErr *RPCError
	if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &rpcErr) || rpcErr.Code != codes.InvalidArgument {
		t.Errorf("StartTask with an invalid mount = %v, want ErrInvalidConfig with InvalidArgument", err)
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "mounts[0]" {
		t.Errorf("invalid mount error %v does not carry the ConfigError for mounts[0]", err)
	}
}

// A client that negotiated an API older than mounts refuses to send a task
// with mounts, whatever the plugin's capabilities say: a plugin of that
// version would run the task and drop them.
func TestClientRefusesMountsToAnOlderPlugin(t *testing.T) {
	f := newFakeDriver()
	f.MountVolumes = true
	c, _ := serve(t, f)
	cfg := &driverpb.TaskConfig{Id: "m1", DriverConfig: ConfigMap{"command": StringValue("x")},
		Mounts: []*driverpb.Mount{{HostPath: "/srv/data", TaskPath: "/data"}}}

	c.mu.Lock()
	c.apiVersion = APIVersionMounts - 1
	c.mu.Unlock()
	_, err := c.StartTask(testCtx(t), cfg)
	var rerr *RPCError
	if !errors.Is(err, ErrNotSupported) || !errors.As(err, &rerr) || rerr.Code != codes.Unimplemented {
		t.Fatalf("StartTask with mounts at API %d = %v, want ErrNotSupported (Unimplemented)", APIVersionMounts-1, err)
	}
	if _, err := f.tasks.Get("m1"); err == nil {
		t.Fatal("the task reached the plugin")
	}

	c.mu.Lock()
	c.apiVersion = APIVersionMounts
	c.mu.Unlock()
	if _, err := c.StartTask(testCtx(t), cfg); err != nil {
		t.Fatalf("StartTask with mounts at API %d: %v", APIVersionMounts, err)
	}
}
