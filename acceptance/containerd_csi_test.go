package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/internal/containerdtest"
	"berth.dev/berth/internal/ociarchive"
	"berth.dev/berth/internal/testutil"
)

// The CSI-in-a-container acceptance test: the containerd driver
// (examples/containerd, a module of its own requiring only the sdk and
// containerd's client) is built into an agent's plugin_dir, and the agent
// (server and client, one process) runs against containerd: the private one
// of make test (BERTH_CONTAINERD_ADDRESS), else one the test starts
// (package internal/containerdtest). The test packs two OCI image archives
// itself (internal/ociarchive, no registry) and tasks `load` them:
//
//   - the berth binary under test, with the shared libraries it links, run
//     as the built-in hostpath plugin (`berth builtin csi-hostpath`): a
//     privileged monolith csi_plugin task whose state is a host directory
//     bound into the container;
//   - a shell, cat and sleep with their libraries: the consumers.
//
// It creates a volume through the containerised plugin; a containerised
// consumer writes a file to it and, while it runs, the host sees the
// plugin's staging and publish mounts (made inside the plugin's container
// under its stage_publish_base_dir: bidirectional propagation reached the
// host, and the consumer's bind of the publish target is the volume — the
// file is in the plugin's state directory); the writer stops and its claim
// is freed with nothing left mounted; a second consumer reads the file back.
//
// Then the plugin job is updated to hold NodeStageVolume's reply (the
// fault rig's --delay-after, see volumes_faults_test.go), a consumer of a
// second volume starts, and the plugin's container process is killed -9
// while its stage is held: as under exec, the plugin task restarts under
// its restart policy (a new container process), the stage is retried, and
// the claim ends in use by the running consumer, its file written through
// the mount, within 30 seconds of the plugin running again.
//
// Before the writer stops, the agent is killed -9 and restarted: both
// containers run on with the same PIDs, the plugin is found again without
// a restart, and the claim stays in use by the same alloc.
//
// Each step is timed and the times logged as a table. The agent's driver
// uses a containerd namespace of its own (ctrNamespace), so the test finds
// the plugin's container process there (ctr) and cleans it up after a
// failed run without touching anything else in that containerd.
func TestCSIPluginInAContainer(t *testing.T) {
	testutil.RequireRoot(t, "containerd runs privileged containers and the hostpath plugin bind-mounts volumes")
	if _, err := exec.LookPath("ctr"); err != nil {
		testutil.Unavailable(t, "no ctr binary in PATH (Debian's containerd package ships it; make containerd-deps installs it)")
	}
	addr := containerdtest.Address(t)
	var times lcTimes
	defer func() { t.Logf("the containerised CSI flow's steps:\n%s", times.table()) }()

	pluginDir := t.TempDir()
	times.step("build the containerd driver (go build)", func() {
		build := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "containerd"), ".")
		build.Dir = filepath.Join("..", "examples", "containerd")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building examples/containerd: %v\n%s", err, out)
		}
	})
	images := t.TempDir()
	hostpathImage, consumerImage := filepath.Join(images, "hostpath.tar"), filepath.Join(images, "consumer.tar")
	times.step("pack the hostpath and consumer image archives", func() {
		packImage(t, hostpathImage, ctrHostpathRef, map[string]string{berthBin: "/bin/berth"})
		packImage(t, consumerImage, ctrConsumerRef, map[string]string{lookPath(t, "sh"): "/bin/sh", lookPath(t, "cat"): "/bin/cat", lookPath(t, "sleep"): "/bin/sleep"})
	})

	var a *agent
	times.step("agent up, containerd driver healthy", func() {
		a = startContainerdAgent(t, pluginDir, addr)
	})
	// Cleanups run last-registered first: the jobs are stopped while the
	// agent runs (consumers before the plugin), then (registered by
	// startContainerdAgent) the agent stops, containers left in the
	// test's namespace are removed and mounts left under its directory
	// are detached.
	t.Cleanup(func() {
		stopConsumersThenPlugin(t, a, []string{"cw", "cr", "cf"}, []string{"cvol", "cfault"}, "hpc")
	})

	state := t.TempDir()
	times.step("plugin job run → plugin schedulable (image loaded)", func() {
		runJob(t, a, "hpc", ctrPluginJob(hostpathImage, state))
		waitPluginSchedulable(t, a, "hpc", 1, 1)
	})
	p, err := a.plugin("hpc")
	if err != nil {
		t.Fatal(err)
	}
	if p.Provider != hostpathProvider {
		t.Fatalf("plugin hpc's provider %q, want %q", p.Provider, hostpathProvider)
	}
	nodeID := p.nodeID()
	var ext string
	times.step("volume create", func() { ext = createVolume(t, a, "cvol", "hpc") })

	dataDir := filepath.Join(a.dir, "data")
	var w apiAlloc
	times.step("writer job run → running, claim in use", func() {
		runJob(t, a, "cw", ctrConsumerJob("cw", "service", "cvol", consumerImage,
			`echo written-in-a-container > /data/hello && echo wrote && sleep 600 & wait`))
		w = waitClaimedBy(t, a, "cw", "cvol", nodeID)
		waitOutput(t, a, w.ID, "app", "wrote")
	})
	// The plugin mounted the volume inside its container, at its staging
	// and publish paths under its stage_publish_base_dir; the host sees
	// both mounts (the container's mounts propagate back), and the file the
	// consumer wrote through its bind of the publish target is in the
	// plugin's state directory, and in the publish target seen from here.
	staging := filepath.Join(dataDir, "csi", "volumes", "hpc", "staging", "cvol")
	target := filepath.Join(dataDir, "csi", "volumes", "hpc", "publish", w.ID, "cvol")
	if !mounted(t, staging) || !mounted(t, target) {
		t.Fatalf("the host sees the plugin's staging mount %v and publish mount %v; want both (bidirectional propagation)", mounted(t, staging), mounted(t, target))
	}
	for _, f := range []string{filepath.Join(state, "volumes", ext, "data", "hello"), filepath.Join(target, "hello")} {
		if b, err := os.ReadFile(f); err != nil || string(b) != "written-in-a-container\n" {
			t.Fatalf("the consumer's file at %s: %q (%v)", f, b, err)
		}
	}
	// The agent killed -9 and restarted: the containers run on (containerd
	// keeps them), the driver finds them again with their PIDs, the plugin
	// is found again without a restart, and the volume stays in use by the
	// same alloc, mounted.
	before, err := ctrTasks(addr)
	if err != nil || len(before) != 2 {
		t.Fatalf("containerd tasks before the restart: %v (%v), want the plugin and the writer", before, err)
	}
	pluginAlloc := p.Allocations[0].AllocID
	times.step("agent killed -9 and restarted → containers found again", func() {
		killed := time.Now()
		a.kill()
		a.start()
		eventually(t, 60*time.Second, "the plugin found again and the writer running with its claim", func() error {
			if err := pluginFoundSince(a, pluginAlloc, killed); err != nil {
				return err
			}
			v, err := a.volume("cvol")
			if err != nil {
				return err
			}
			if len(v.Claims) != 1 || v.Claims[0].AllocID != w.ID || v.Claims[0].State != "in-use" {
				return fmt.Errorf("claims %+v, want %s's in use", v.Claims, w.ID)
			}
			allocs, err := a.jobAllocs("cw")
			if err != nil || len(allocs) != 1 || allocs[0].ID != w.ID || allocs[0].ClientStatus != "running" {
				return fmt.Errorf("allocs %+v (%v), want %s running", allocs, err, w.ID)
			}
			return nil
		})
	})
	if after, err := ctrTasks(addr); err != nil || !maps.Equal(after, before) {
		t.Fatalf("containerd tasks after the restart: %v (%v), want the same as before: %v", after, err, before)
	}
	if !mounted(t, staging) || !mounted(t, target) {
		t.Fatalf("after the restart the host sees the staging mount %v and publish mount %v; want both", mounted(t, staging), mounted(t, target))
	}
	times.step("writer job stop → claim freed", func() {
		stopJob(t, a, "cw")
		waitVolumeFreed(t, a, "cvol", time.Now(), freeBound)
	})
	// (The directory itself is a mount: the driver made the host side of
	// the plugin's bidirectional mount a shared mount point.)
	eventually(t, 10*time.Second, "nothing mounted under the plugin's staging and publish directories", func() error {
		if m := mountsStrictlyUnder(t, filepath.Join(dataDir, "csi", "volumes", "hpc")); len(m) != 0 {
			return fmt.Errorf("still mounted: %v", m)
		}
		return nil
	})

	times.step("reader job run → complete, file read", func() {
		r := runCtrBatch(t, a, "cr", ctrConsumerJob("cr", "batch", "cvol", consumerImage, `cat /data/hello`))
		if out := mountTaskLog(t, a, r, "app", false); strings.TrimSpace(out) != "written-in-a-container" {
			t.Fatalf("the reader printed %q, want the writer's file", out)
		}
		waitVolumeFreed(t, a, "cvol", time.Now(), freeBound)
	})

	// The fault: the plugin's container killed -9 while it holds
	// NodeStageVolume's reply (the volume staged, the client not told).
	markers := filepath.Join(state, "markers")
	times.step("plugin job updated to hold NodeStageVolume → schedulable", func() {
		var old []string
		for _, pa := range p.Allocations {
			old = append(old, pa.AllocID)
		}
		runJob(t, a, "hpc", ctrPluginJob(hostpathImage, state,
			"--delay-marker-dir", "/state/markers", "--delay-after", "NodeStageVolume="+faultDelay))
		eventually(t, 60*time.Second, "the updated plugin serving", func() error {
			p, err := a.plugin("hpc")
			if err != nil {
				return err
			}
			if err := wantCounts(p, 1, 1, 1, 1); err != nil {
				return err
			}
			ctrl, node := p.Controllers[nodeID], p.Nodes[nodeID]
			if len(p.Allocations) != 1 || ctrl.AllocID != p.Allocations[0].AllocID || node.AllocID != ctrl.AllocID ||
				!ctrl.Healthy || !node.Healthy || slices.Contains(old, ctrl.AllocID) {
				return fmt.Errorf("allocations %+v, controller %+v, node %+v; want the one new alloc (was %v) serving both, healthy", p.Allocations, ctrl, node, old)
			}
			return nil
		})
	})
	var faultExt string
	times.step("volume create (fault)", func() { faultExt = createVolume(t, a, "cfault", "hpc") })
	var pid int
	times.step("consumer run → stage held", func() {
		runJob(t, a, "cf", ctrConsumerJob("cf", "service", "cfault", consumerImage,
			`echo written-by-cf > /data/hello && sleep 600 & wait`))
		eventually(t, 30*time.Second, "NodeStageVolume of "+faultExt+" held", func() error {
			m, _ := filepath.Glob(filepath.Join(markers, fmt.Sprintf("NodeStageVolume.after.%s.%s.*", faultExt, a.name)))
			if len(m) == 0 {
				return fmt.Errorf("no marker in %s", markers)
			}
			return nil
		})
		pid = ctrPluginPID(t, addr)
	})
	var healed time.Time
	times.step("plugin container killed -9 → running again", func() {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 the plugin's container process %d: %v", pid, err)
		}
		eventually(t, 30*time.Second, "the plugin's container running again", func() error {
			got, err := ctrPluginPIDOnce(addr)
			if err != nil {
				return err
			}
			if got == pid || !alive(got) {
				return fmt.Errorf("plugin PID %d, was %d", got, pid)
			}
			return nil
		})
		healed = time.Now()
	})
	times.step("claim in use by the running consumer", func() {
		eventually(t, 30*time.Second, "cfault in use by cf's running alloc, its file written", func() error {
			v, err := a.volume("cfault")
			if err != nil {
				return err
			}
			// Never two writers, two attachments or two publish targets
			// on the way (as the exec variant's settle checks).
			if len(v.Claims) > 1 || len(v.Attachments) > 1 {
				t.Fatalf("cfault: %d claims and %d attachments at once: %+v", len(v.Claims), len(v.Attachments), v)
			}
			var rec hpNodeRecord
			if b, err := os.ReadFile(filepath.Join(state, "nodes", a.name, "volumes", faultExt+".json")); err == nil {
				if err := json.Unmarshal(b, &rec); err != nil {
					t.Fatalf("the plugin's record of cfault: %v", err)
				}
			}
			if len(rec.Targets) > 1 {
				t.Fatalf("cfault published at %d targets at once: %v", len(rec.Targets), rec.Targets)
			}
			if len(v.Claims) != 1 || v.Claims[0].State != "in-use" || v.Claims[0].Mode != "write" {
				return fmt.Errorf("claims %+v", v.Claims)
			}
			allocs, err := a.jobAllocs("cf")
			if err != nil {
				return err
			}
			if len(allocs) != 1 || allocs[0].ID != v.Claims[0].AllocID || allocs[0].ClientStatus != "running" {
				return fmt.Errorf("claim %+v, allocs %+v", v.Claims[0], allocs)
			}
			b, err := os.ReadFile(filepath.Join(state, "volumes", faultExt, "data", "hello"))
			if err != nil || string(b) != "written-by-cf\n" {
				return fmt.Errorf("the consumer's file: %q (%v)", b, err)
			}
			if len(rec.Targets) != 1 {
				return fmt.Errorf("the plugin's record of cfault on %s: targets %v, want the consumer's", a.name, rec.Targets)
			}
			return nil
		})
		t.Logf("after the plugin's container was killed during stage: in use by the running consumer, %s after it ran again",
			time.Since(healed).Round(time.Millisecond))
	})
	times.step("consumer stop → claim freed", func() {
		stopJob(t, a, "cf")
		waitVolumeFreed(t, a, "cfault", time.Now(), freeBound)
	})
	// The plugin's job stopped, nothing of it is left: no container in the
	// namespace, nothing mounted under the agent's data directory (the
	// driver released the shared mount points it made).
	times.step("plugin job stop → plugin gone, nothing mounted", func() {
		stopJob(t, a, "hpc")
		pluginGone(t, a, "hpc")
		eventually(t, 30*time.Second, "no container left and nothing mounted under the data directory", func() error {
			if tasks, err := ctrTasks(addr); err != nil || len(tasks) != 0 {
				return fmt.Errorf("containerd tasks %v (%v)", tasks, err)
			}
			if left, err := ctrLeftovers(addr); err != nil || len(left) != 0 {
				return fmt.Errorf("containerd still holds %q (%v)", left, err)
			}
			if m, err := mountsUnder(dataDir); err != nil || len(m) != 0 {
				return fmt.Errorf("still mounted: %v (%v)", m, err)
			}
			return nil
		})
	})
}

// Image references of the test's archives, and the containerd namespace
// of its agent's driver.
const (
	ctrHostpathRef = "berth.test/acceptance-hostpath:1"
	ctrConsumerRef = "berth.test/acceptance-consumer:1"
	ctrNamespace   = "berth-acceptance"
)

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		p, err = filepath.EvalSymlinks(p)
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

// packImage writes an image archive of the executables (host path →
// path in the image) with what each needs to run.
func packImage(t *testing.T, archive, ref string, executables map[string]string) {
	t.Helper()
	var files []ociarchive.File
	seen := map[string]bool{}
	for src, dst := range executables {
		fs, err := ociarchive.Executable(src, dst)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if !seen[f.Path] {
				seen[f.Path] = true
				files = append(files, f)
			}
		}
	}
	files = append(files, ociarchive.File{Path: "/tmp", Mode: os.ModeDir | os.ModeSticky | 0o777})
	if err := ociarchive.WriteFile(archive, ociarchive.Image{Name: ref, Files: files}); err != nil {
		t.Fatalf("packing %s: %v", ref, err)
	}
}

// startContainerdAgent starts one agent (server and client, its state on
// disk, so that it can be killed and restarted) whose
// plugin_dir holds the containerd driver, configured for the containerd at
// addr and the test's namespace (privileged containers and host mounts
// allowed: the hostpath plugin needs both), and waits until the node reports the
// driver healthy. Its data directory is short, as startDevAgent's is, for
// the plugin's socket path.
func startContainerdAgent(t *testing.T, pluginDir, addr string) *agent {
	t.Helper()
	a := newAgent(t, "ctr1", freePorts(t), fmt.Sprintf(`
plugin_dir = %q
server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled = true
}
plugin "containerd" {
  config {
    address           = %q
    namespace         = %q
    allow_privileged  = true
    allow_host_mounts = true
  }
}`, pluginDir, addr, ctrNamespace))
	dir, err := os.MkdirTemp("", "berth-acc-ctr-")
	if err != nil {
		t.Fatal(err)
	}
	a.dir = dir
	a.flags = []string{"-data-dir", filepath.Join(dir, "data")}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing the agent's directory: %v", err)
		}
	})
	t.Cleanup(func() { unmountUnder(t, a.dir) })
	t.Cleanup(func() { removeCtrLeftovers(t, addr) })
	t.Cleanup(func() { killByExe(t, filepath.Join(pluginDir, "containerd")) })
	a.start()
	eventually(t, 60*time.Second, "the node ready with the containerd driver healthy", func() error {
		ns, err := a.nodes()
		if err != nil {
			return err
		}
		if len(ns) != 1 || ns[0].Status != "ready" {
			return fmt.Errorf("nodes %+v, want one ready", ns)
		}
		var n struct {
			Drivers map[string]struct {
				Detected          bool   `json:"detected"`
				Healthy           bool   `json:"healthy"`
				HealthDescription string `json:"health_description"`
			} `json:"drivers"`
		}
		if err := a.getJSON("/v1/node/"+ns[0].ID, &n); err != nil {
			return err
		}
		if d, ok := n.Drivers["containerd"]; !ok || !d.Detected || !d.Healthy {
			return fmt.Errorf("driver containerd: %+v (present %v)", d, ok)
		}
		return nil
	})
	return a
}

// ctrPluginJob is the hostpath plugin as a privileged monolith task of the
// containerd driver, its state in the host directory state (at /state in
// the container), with extra flags.
func ctrPluginJob(image, state string, extra ...string) string {
	args := []string{"builtin", "csi-hostpath", "--endpoint", "${CSI_ENDPOINT}", "--node-id", "${node.unique.name}",
		"--mode", "monolith", "--state-dir", "/state", "--log-level", "debug"}
	quoted := make([]string, 0, len(args)+len(extra))
	for _, s := range append(args, extra...) {
		quoted = append(quoted, strconv.Quote(s))
	}
	return fmt.Sprintf(`
job "hpc" {
  type = "service"
  group "plugin" {
    restart {
      attempts = 2
      interval = "1m"
      delay    = "1s"
      mode     = "fail"
    }
    task "plugin" {
      driver = "containerd"
      config {
        image      = %q
        load       = %q
        command    = "/bin/berth"
        args       = [%s]
        privileged = true
        mounts     = [%q]
      }
      csi_plugin {
        id             = "hpc"
        type           = "monolith"
        health_timeout = "30s"
      }
      resources {
        cpu    = 50
        memory = 128
      }
      kill_timeout = "5s"
    }
  }
}
`, ctrHostpathRef, image, strings.Join(quoted, ", "), state+":/state")
}

// ctrConsumerJob is a job of one containerised task "app" that claims vol
// single-node-writer at /data and runs script under sh.
func ctrConsumerJob(id, typ, vol, image, script string) string {
	return fmt.Sprintf(`
job %q {
  type = %q
  group "app" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    volume "data" {
      type            = "csi"
      source          = %q
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "app" {
      driver = "containerd"
      config {
        image   = %q
        load    = %q
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
      resources {
        cpu    = 20
        memory = 32
      }
      kill_timeout = "2s"
    }
  }
}
`, id, typ, vol, ctrConsumerRef, image, "trap 'exit 0' TERM; "+script)
}

// runCtrBatch runs a batch job and waits until its one alloc completed,
// returning its ID.
func runCtrBatch(t *testing.T, a *agent, id, spec string) string {
	t.Helper()
	runJob(t, a, id, spec)
	var alloc string
	eventually(t, 60*time.Second, id+"'s alloc complete", func() error {
		allocs, err := a.jobAllocs(id)
		if err != nil {
			return err
		}
		if len(allocs) != 1 {
			return fmt.Errorf("%d allocs", len(allocs))
		}
		switch allocs[0].ClientStatus {
		case "complete":
			alloc = allocs[0].ID
			return nil
		case "failed", "lost":
			out, _ := a.cli("alloc", "status", allocs[0].ID)
			t.Fatalf("%s's alloc %s: %s\n%s", id, allocs[0].ID, allocs[0].ClientStatus, out)
		}
		return fmt.Errorf("alloc %s is %s", allocs[0].ID, allocs[0].ClientStatus)
	})
	return alloc
}

// ctrTasks lists the tasks containerd runs in the test's namespace: their
// IDs and PIDs (host PIDs).
func ctrTasks(addr string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", "--address", addr, "--namespace", ctrNamespace, "tasks", "list").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ctr tasks list: %v: %s", err, out)
	}
	tasks := map[string]int{}
	for _, line := range strings.Split(string(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "RUNNING" {
			continue
		}
		if pid, err := strconv.Atoi(f[1]); err == nil {
			tasks[f[0]] = pid
		}
	}
	return tasks, nil
}

// ctrLeftovers lists what the driver should have deleted in the test's
// namespace: tasks in any state, containers, and the containers' active
// rootfs snapshots (the images' committed layers stay).
func ctrLeftovers(addr string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctr := func(args ...string) ([]string, error) {
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", addr, "--namespace", ctrNamespace}, args...)...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
	}
	var left []string
	tasks, err := ctr("tasks", "list")
	if err != nil {
		return nil, err
	}
	for _, line := range tasks[1:] { // after the header
		if f := strings.Fields(line); len(f) > 0 {
			left = append(left, "task "+f[0])
		}
	}
	containers, err := ctr("containers", "list", "--quiet")
	if err != nil {
		return nil, err
	}
	for _, id := range containers {
		if id != "" {
			left = append(left, "container "+id)
		}
	}
	snapshots, err := ctr("snapshots", "list")
	if err != nil {
		return nil, err
	}
	for _, line := range snapshots[1:] {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == "Active" {
			left = append(left, "snapshot "+f[0])
		}
	}
	return left, nil
}

// ctrPluginPIDOnce is the host PID of the running hostpath plugin's
// container process: the task in the test's namespace whose command line
// is the plugin's.
func ctrPluginPIDOnce(addr string) (int, error) {
	tasks, err := ctrTasks(addr)
	if err != nil {
		return 0, err
	}
	var pids []int
	for _, pid := range tasks {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.HasPrefix(string(b), "/bin/berth\x00builtin\x00csi-hostpath\x00") {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		return 0, fmt.Errorf("%d running plugin containers (tasks %v), want 1", len(pids), tasks)
	}
	return pids[0], nil
}

func ctrPluginPID(t *testing.T, addr string) int {
	t.Helper()
	pid, err := ctrPluginPIDOnce(addr)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// removeCtrLeftovers kills and deletes what a failed run left in the
// test's namespace (the agent stopped: nothing else uses it), logging each.
func removeCtrLeftovers(t *testing.T, addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctr := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", addr, "--namespace", ctrNamespace}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := ctr("tasks", "list", "--quiet"); err == nil {
		for _, id := range strings.Fields(out) {
			t.Logf("removing leftover containerd task %s", id)
			if out, err := ctr("tasks", "delete", "--force", id); err != nil {
				t.Logf("ctr tasks delete %s: %v: %s", id, err, out)
			}
		}
	}
	if out, err := ctr("containers", "list", "--quiet"); err == nil {
		for _, id := range strings.Fields(out) {
			t.Logf("removing leftover containerd container %s", id)
			if out, err := ctr("containers", "delete", id); err != nil {
				t.Logf("ctr containers delete %s: %v: %s", id, err, out)
			}
		}
	}
	for _, ref := range []string{ctrHostpathRef, ctrConsumerRef} {
		_, _ = ctr("images", "remove", ref)
	}
}
