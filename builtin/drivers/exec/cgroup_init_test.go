package execdriver_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"berth.dev/berth/sdk/driverpb"
)

// cgroupOf is pid's cgroup path in the hierarchy whose controller list
// (the second field of /proc/<pid>/cgroup) holds controller; "" for v2's.
func cgroupOf(t *testing.T, pid, controller string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && (f[1] == controller || controller != "" && slices.Contains(strings.Split(f[1], ","), controller)) {
			return f[2]
		}
	}
	t.Fatalf("pid %s has no cgroup of %q in %q", pid, controller, data)
	return ""
}

// initChildren are the PIDs the init's threads forked.
func initChildren(t *testing.T, initPid string) []string {
	t.Helper()
	var kids []string
	threads, err := os.ReadDir(filepath.Join("/proc", initPid, "task"))
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range threads {
		data, _ := os.ReadFile(filepath.Join("/proc", initPid, "task", th.Name(), "children"))
		kids = append(kids, strings.Fields(string(data))...)
	}
	return kids
}

// TestInitLeavesTheTaskCPUCgroup: on a cgroup v1 host the task's
// namespace init, once it has forked the task, is in the plugin's CPU
// cgroup (its wake-ups on a stop are not scheduled as the task's group),
// while the task is in its own and the init still in the task's memory
// cgroup. On v2, where leaving would take it out of the memory limit
// too, it stays in the task's cgroup.
func TestInitLeavesTheTaskCPUCgroup(t *testing.T) {
	d := client(t)
	cfg := taskCfg(t, "initcg", sh(`touch /ready; exec sleep 1000`))
	cfg.Resources = &driverpb.Resources{MemoryBytes: 48 << 20, CpuShares: 20}
	start(t, d, cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))
	st, err := d.InspectTask(ctxT(t), cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	initPid := st.GetAttributes()["pid"]
	kids := initChildren(t, initPid)
	if len(kids) != 1 {
		t.Fatalf("init %s has children %v, want the task alone", initPid, kids)
	}
	task, group := kids[0], "/berth/"+cfg.GetId()
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		if got := cgroupOf(t, initPid, ""); got != group {
			t.Errorf("v2: the init is in %q, want the task's %q", got, group)
		}
		return
	}
	if got := cgroupOf(t, task, "cpu"); got != group {
		t.Errorf("the task's CPU cgroup is %q, want %q", got, group)
	}
	if got, want := cgroupOf(t, initPid, "cpu"), cgroupOf(t, strconv.Itoa(os.Getpid()), "cpu"); got != want {
		t.Errorf("the init's CPU cgroup is %q, want the plugin's %q", got, want)
	}
	if got := cgroupOf(t, initPid, "memory"); got != group {
		t.Errorf("the init's memory cgroup is %q, want the task's %q", got, group)
	}
}
