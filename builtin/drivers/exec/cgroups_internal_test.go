package execdriver

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/sdk/driverpb"
)

// TestCgroupV2Backend runs the v2 code path on whatever cgroup2 hierarchy
// this host has: the unified one at /sys/fs/cgroup, or a hybrid host's
// /sys/fs/cgroup/unified. A hybrid host's v2 hierarchy has no controllers
// (they are bound to v1), so limits are only checked where the memory
// controller is available; creating, joining, reading CPU time and
// removing are checked everywhere.
func TestCgroupV2Backend(t *testing.T) {
	testutil.RequireRoot(t, "creating cgroups")
	mount := ""
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			mount = p
			break
		}
	}
	if mount == "" {
		testutil.Unavailable(t, "no cgroup2 hierarchy mounted")
	}
	c := &cgroupDriver{v2: mount}
	controllers, _ := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	res := &driverpb.Resources{}
	withMemory := slices.Contains(strings.Fields(string(controllers)), "memory")
	if withMemory {
		res.MemoryBytes = 32 << 20
	}
	id := "v2-backend-" + strconv.Itoa(os.Getpid())
	procs, err := c.create(id, res)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.remove(id) })
	if len(procs) != 1 || procs[0] != filepath.Join(mount, "berth", id, "cgroup.procs") {
		t.Fatalf("cgroup.procs files %v", procs)
	}
	if withMemory {
		if data, _ := os.ReadFile(filepath.Join(mount, "berth", id, "memory.max")); string(data) != "33554432\n" {
			t.Errorf("memory.max = %q, want 33554432", data)
		}
	}
	// A process that burns some CPU inside the cgroup.
	child, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(procs[0], []byte(strconv.Itoa(child.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	u, err := c.stat(id)
	if err != nil {
		t.Fatal(err)
	}
	if u.cpuUser+u.cpuSystem == 0 {
		t.Errorf("v2 stats show no CPU time for a process that ran in the cgroup: %+v", u)
	}
	if err := c.remove(id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mount, "berth", id)); !os.IsNotExist(err) {
		t.Errorf("v2 cgroup still there after remove: %v", err)
	}
	if _, err := c.stat(id); err != errNoCgroup {
		t.Errorf("stat of a removed cgroup = %v, want errNoCgroup", err)
	}
}
