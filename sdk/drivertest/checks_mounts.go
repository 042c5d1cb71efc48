package drivertest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// checkMounts runs for drivers that honour mounts (mount_volumes at API
// version sdk.APIVersionMounts or later): a task gets exactly the mounts it
// was given, and invalid mounts are refused with ErrInvalidConfig naming
// the mount. Other drivers skip it: not honouring mounts is a capability
// they declare, not a machine that cannot run the test, so CI=true does
// not turn the skip into a failure (berth never sends them mounts).
func checkMounts(t *testing.T, s *suite) {
	d := s.driver
	ctx, cancel := s.ctx()
	defer cancel()
	caps, err := d.Capabilities(ctx)
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	if !sdk.MountsSupported(d.APIVersion(), caps) {
		t.Skipf("driver %q does not honour mounts (mount_volumes %v at API version %d; needs version %d or later): mount checks do not apply",
			d.Name(), caps.GetMountVolumes(), d.APIVersion(), sdk.APIVersionMounts)
	}
	if s.h.Cases.MountsSeen == nil {
		t.Fatalf("driver %q advertises mount_volumes but Cases.MountsSeen is nil: the harness cannot see which mounts a task got", d.Name())
	}
	t.Run("Received", func(t *testing.T) { checkMountsReceived(t, s) })
	t.Run("Invalid", func(t *testing.T) { checkMountsInvalid(t, s) })
}

// checkMountsReceived starts a task with one mount of each propagation
// (one read-only) and asks the driver which mounts the task got.
func checkMountsReceived(t *testing.T, s *suite) {
	d := s.driver
	host := t.TempDir()
	var mounts []*driverpb.Mount
	for i, m := range []struct {
		name string
		ro   bool
		prop driverpb.MountPropagation
	}{
		{"private", false, driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE},
		{"host-to-task", true, driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK},
		{"bidirectional", false, driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL},
	} {
		dir := filepath.Join(host, m.name)
		// Each host dir holds a file naming it, for drivers whose
		// MountsSeen looks inside the task.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "drivertest-mount"), []byte(m.name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		mounts = append(mounts, &driverpb.Mount{
			HostPath: dir, TaskPath: fmt.Sprintf("/drivertest/mount%d-%s", i, m.name), ReadOnly: m.ro, Propagation: m.prop,
		})
	}
	cfg := s.task(t, s.h.Cases.RunUntilStopped())
	cfg.Mounts = mounts
	s.startReady(t, d, cfg)
	ctx, cancel := s.ctx()
	defer cancel()
	seen, err := s.h.Cases.MountsSeen(ctx, d, cfg)
	if err != nil {
		t.Fatalf("MountsSeen(%s): %v", cfg.GetId(), err)
	}
	if !sameMounts(seen, mounts) {
		t.Errorf("task %s got mounts\n%s\nwant exactly\n%s", cfg.GetId(), formatMounts(seen), formatMounts(mounts))
	}
}

func sameMounts(a, b []*driverpb.Mount) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func formatMounts(ms []*driverpb.Mount) string {
	if len(ms) == 0 {
		return "  (none)"
	}
	lines := make([]string, len(ms))
	for i, m := range ms {
		lines[i] = fmt.Sprintf("  %s -> %s read_only=%v %s", m.GetHostPath(), m.GetTaskPath(), m.GetReadOnly(), m.GetPropagation())
	}
	return strings.Join(lines, "\n")
}

// checkMountsInvalid: each invalid mount list is refused with a
// *sdk.ConfigError for the bad mount's index, naming its task path, and no
// task is left behind.
func checkMountsInvalid(t *testing.T, s *suite) {
	d := s.driver
	host := t.TempDir()
	good := &driverpb.Mount{HostPath: host, TaskPath: "/drivertest/good"}
	for _, b := range []struct {
		what string
		bad  *driverpb.Mount
	}{
		{"a relative host path", &driverpb.Mount{HostPath: "relative/dir", TaskPath: "/drivertest/rel"}},
		{"a task path escaping with ..", &driverpb.Mount{HostPath: host, TaskPath: "/drivertest/../../etc"}},
		{"a relative task path", &driverpb.Mount{HostPath: host, TaskPath: "drivertest"}},
		{"a duplicate task path", &driverpb.Mount{HostPath: host, TaskPath: "/drivertest/good/"}},
		{"an unknown propagation", &driverpb.Mount{HostPath: host, TaskPath: "/drivertest/prop", Propagation: 99}},
	} {
		cfg := s.task(t, s.h.Cases.ExitCode(0))
		cfg.Mounts = []*driverpb.Mount{good, b.bad}
		ctx, cancel := s.ctx()
		_, err := d.StartTask(ctx, cfg)
		what := "StartTask with " + b.what
		wantConfigError(t, what, err, d.Name(), sdk.ScopeTask, "mounts[1]")
		var ce *sdk.ConfigError
		if errors.As(err, &ce) && !strings.Contains(ce.Problem, fmt.Sprintf("%q", b.bad.GetTaskPath())) {
			t.Errorf("%s: problem %q does not name the mount's task path %q", what, ce.Problem, b.bad.GetTaskPath())
		}
		if _, err := d.InspectTask(ctx, cfg.GetId()); !errors.Is(err, sdk.ErrTaskNotFound) {
			t.Errorf("rejected task %s exists: InspectTask = %v", cfg.GetId(), err)
		}
		cancel()
	}
}
