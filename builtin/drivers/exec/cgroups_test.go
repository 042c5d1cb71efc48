package execdriver_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sdk/driverpb"
)

// cgroupDirs are where a task's cgroup can be, on v1 and v2 hosts.
func cgroupDirs(id string) []string {
	return []string{
		"/sys/fs/cgroup/memory/berth/" + id, "/sys/fs/cgroup/cpu/berth/" + id,
		"/sys/fs/cgroup/berth/" + id,
	}
}

// limitFile reads the first of the files that exists, trimmed.
func limitFile(paths ...string) (string, bool) {
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(data)), true
		}
	}
	return "", false
}

// TestCgroupLimitsAndRemoval: the task's cgroup has its memory limit and
// CPU shares (v1: memory.limit_in_bytes and cpu.shares; v2: memory.max and
// cpu.weight), the task is in it, and DestroyTask removes it (in the
// background, once the task is gone).
func TestCgroupLimitsAndRemoval(t *testing.T) {
	d := client(t)
	cfg := taskCfg(t, "limits", sh(`touch /ready; exec sleep 1000`))
	cfg.Resources = &driverpb.Resources{MemoryBytes: 48 << 20, CpuShares: 512}
	start(t, d, cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))
	id := cfg.GetId()
	if v, ok := limitFile("/sys/fs/cgroup/memory/berth/"+id+"/memory.limit_in_bytes", "/sys/fs/cgroup/berth/"+id+"/memory.max"); !ok || v != "50331648" {
		t.Errorf("memory limit = %q (found %v), want 50331648", v, ok)
	}
	if v, ok := limitFile("/sys/fs/cgroup/cpu/berth/"+id+"/cpu.shares", "/sys/fs/cgroup/berth/"+id+"/cpu.weight"); !ok || (v != "512" && v != "20") {
		t.Errorf("cpu shares = %q (found %v), want 512 (v1) or weight 20 (v2)", v, ok)
	}
	st, err := d.InspectTask(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	procs, ok := limitFile("/sys/fs/cgroup/memory/berth/"+id+"/cgroup.procs", "/sys/fs/cgroup/berth/"+id+"/cgroup.procs")
	if !ok || !strings.Contains("\n"+procs+"\n", "\n"+st.GetAttributes()["pid"]+"\n") {
		t.Errorf("cgroup.procs %q lacks the task's init %s", procs, st.GetAttributes()["pid"])
	}
	if err := d.DestroyTask(ctxT(t), id, true); err != nil {
		t.Fatal(err)
	}
	// The removal goes on in the background once the task is gone.
	for _, dir := range cgroupDirs(id) {
		waitFor(t, "cgroup "+dir+" removed", func() bool { _, err := os.Stat(dir); return err != nil })
	}
}

// TestOOMKillReported: a task that outgrows its memory limit is killed by
// the kernel, and its exit says so, with an "OOM killed" event.
func TestOOMKillReported(t *testing.T) {
	d := client(t)
	// Subscribed now, before the task can end.
	events := d.TaskEvents(ctxT(t))
	// tail keeps a line that never ends in memory, and /dev/zero has no
	// newline.
	cfg := taskCfg(t, "oom", sh(`exec tail /dev/zero`))
	cfg.Resources = &driverpb.Resources{MemoryBytes: 32 << 20}
	start(t, d, cfg)
	res := wait(t, d, cfg.GetId())
	if !res.GetOomKilled() || res.GetSignal() != int32(syscall.SIGKILL) {
		t.Errorf("exit of a task over its memory limit = %v, want oom_killed and SIGKILL", res)
	}
	for ev, err := range events {
		if err != nil {
			t.Fatalf(`TaskEvents ended before an "OOM killed" event: %v`, err)
		}
		if ev.GetTaskId() == cfg.GetId() && ev.GetMessage() == "OOM killed" {
			if st, err := d.InspectTask(ctxT(t), cfg.GetId()); err != nil || !st.GetExitResult().GetOomKilled() {
				t.Errorf("InspectTask after the OOM kill: %v, %v; want oom_killed", st, err)
			}
			return
		}
	}
	t.Fatal(`no "OOM killed" task event`)
}

// TestStatsFromCgroup: TaskStats reports CPU time, memory and processes
// of a busy task, read from its cgroup.
func TestStatsFromCgroup(t *testing.T) {
	d := client(t)
	cfg := taskCfg(t, "stats", sh(`x=$(head -c 4000000 /dev/zero | tr '\0' a); touch /ready; while :; do :; done`))
	start(t, d, cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))
	var last *driverpb.TaskResourceUsage
	for u, err := range d.TaskStats(ctxT(t), cfg.GetId(), 100*time.Millisecond) {
		if err != nil {
			t.Fatal(err)
		}
		last = u
		if u.GetCpuUserNanos() > 0 && u.GetMemoryUsageBytes() > 0 && u.GetMemoryRssBytes() > 0 && u.GetProcesses() >= 2 {
			return
		}
	}
	t.Errorf("stats never showed CPU, memory and processes; last %v", last)
}

// TestCgroupRemovedOnceTheTaskExits: the cgroup's removal starts when the
// task's exit is read (its processes are gone), before DestroyTask, so it
// overlaps the client's bookkeeping of the exit instead of delaying what
// follows DestroyTask on a job stop (a volume's unpublish).
func TestCgroupRemovedOnceTheTaskExits(t *testing.T) {
	d := client(t)
	cfg := taskCfg(t, "exits", sh(`exit 3`))
	start(t, d, cfg)
	if res := wait(t, d, cfg.GetId()); res.GetExitCode() != 3 {
		t.Fatalf("exit = %v, want code 3", res)
	}
	for _, dir := range cgroupDirs(cfg.GetId()) {
		waitFor(t, "cgroup "+dir+" removed before DestroyTask", func() bool { _, err := os.Stat(dir); return err != nil })
	}
}
