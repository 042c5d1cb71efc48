package acceptance

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// The whole life of a volume, over three servers and two clients as real
// processes, with a CSI plugin launched as tasks (csi_plugin blocks): a
// monolith (controller and node) on the first client and, when the
// plugin's storage can be reached from both, a node instance on the second
// sharing the monolith's state directory, as plugins sharing a networked
// filesystem do. Each step is timed and the times are logged as a table:
//
//  1. the plugin job runs and the plugin becomes schedulable;
//  2. `volume create`;
//  3. a consumer pinned to the first client writes a file;
//  4. `job stop`: its claim (and attachment) freed;
//  5. a consumer pinned to the second client reads the file back;
//  6. `volume snapshot create`, `snapshot list` (by volume and by plugin);
//  7. `volume expand` with the volume published on the reader's node: the
//     controller expands it and, when the plugin asks for it, the node;
//  8. the reader stopped, a volume created from the snapshot
//     (snapshot_id) holds the file, read by a job on the second client;
//  9. `volume snapshot delete` (the list no longer has it) and `volume
//     delete` of both volumes (gone).
//
// It needs root (testutil.RequireRoot: a failure under CI). It runs with
// the built-in hostpath plugin under raw_exec and under exec (isolated:
// the shared directory reaches the tasks through the exec driver's
// chroot_env, where a separate mount under it stays writable), and with an
// external plugin binary when BERTH_ACCEPTANCE_CSI_PLUGIN names one (see
// doc.go): those subtests exist only then.

// External plugin settings (doc.go documents them).
const (
	envExtPlugin   = "BERTH_ACCEPTANCE_CSI_PLUGIN"
	envExtArgs     = "BERTH_ACCEPTANCE_CSI_PLUGIN_ARGS"
	envExtNodeArgs = "BERTH_ACCEPTANCE_CSI_PLUGIN_NODE_ARGS"
	// defaultExtArgs are the kubernetes-csi hostpath plugin's
	// (hostpathplugin) flags.
	defaultExtArgs = "--endpoint={endpoint} --nodeid={node} --statedir={state}"
)

// lcPlugin is one way of running the lifecycle's plugin.
type lcPlugin struct {
	// id is the plugin's ID; the test's jobs and volume are named after it.
	id     string
	driver string // raw_exec or exec
	// command and args run the plugin in mode (monolith or node) with its
	// state in state (a path as the task sees it).
	command string
	args    func(mode, state string) []string
	// shared: the node instance on the second client reaches the
	// monolith's volumes, so the reader runs there.
	shared bool
	// provider is the name the plugin must report; "" for any.
	provider string
	// nodeExpansion: the plugin's mount volumes need NodeExpandVolume.
	nodeExpansion bool
}

func TestCSILifecycle(t *testing.T) {
	testutil.RequireRoot(t, "the plugins mount volumes (the hostpath plugin bind-mounts them) and the exec driver isolates tasks with namespaces")
	// The shared directory: the state of the plugin's instances on both
	// clients. It is its own mount (a bind of itself, standing in for a
	// network filesystem's mount), so that it stays writable inside exec
	// tasks, which see its parent through a read-only chroot_env bind.
	base, err := os.MkdirTemp("", "berth-acc-shared-")
	if err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(base, "fs")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: these run after the agents stop.
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := syscall.Mount(shared, shared, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting the shared directory %s: %v", shared, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(shared, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting the shared directory: %v", err)
		}
	})
	binds := []chrootBind{{base, "/shared"}}
	ext := os.Getenv(envExtPlugin)
	// Where exec tasks see the external plugin's directory: chroot_env
	// is a map by host path, so a plugin beside berth is under /opt/berth.
	extTaskDir := "/opt/csi-plugin"
	if ext != "" {
		if !filepath.IsAbs(ext) {
			t.Fatalf("%s=%q: want an absolute path", envExtPlugin, ext)
		}
		if filepath.Dir(ext) == filepath.Dir(berthBin) {
			extTaskDir = "/opt/berth"
		} else {
			binds = append(binds, chrootBind{filepath.Dir(ext), extTaskDir})
		}
	}
	c := startCSICluster(t, binds...)

	builtin := func(mode, state string) []string {
		return []string{"builtin", "csi-hostpath", "--endpoint", "${CSI_ENDPOINT}", "--node-id", "${node.unique.name}", "--mode", mode, "--state-dir", state}
	}
	t.Run("hostpath under raw_exec", func(t *testing.T) {
		runLifecycle(t, c, shared, lcPlugin{id: "lc-raw", driver: "raw_exec", command: berthBin, args: builtin,
			shared: true, provider: hostpathProvider, nodeExpansion: true})
	})
	t.Run("hostpath under exec", func(t *testing.T) {
		runLifecycle(t, c, "/shared/fs", lcPlugin{id: "lc-exec", driver: "exec", command: "/opt/berth/" + filepath.Base(berthBin), args: builtin,
			shared: true, provider: hostpathProvider, nodeExpansion: true})
	})
	if ext == "" {
		// Opt-in: no subtest at all, rather than one skipped.
		return
	}
	extArgs := func(mode, state string) []string {
		tmpl := os.Getenv(envExtArgs)
		if mode == "node" {
			tmpl = os.Getenv(envExtNodeArgs)
		} else if tmpl == "" {
			tmpl = defaultExtArgs
		}
		return strings.Fields(strings.NewReplacer("{endpoint}", "${CSI_ENDPOINT}", "{node}", "${node.unique.name}",
			"{state}", state, "{mode}", mode).Replace(tmpl))
	}
	nodeArgs := os.Getenv(envExtNodeArgs) != ""
	t.Run("external plugin under raw_exec", func(t *testing.T) {
		runLifecycle(t, c, shared, lcPlugin{id: "lc-ext-raw", driver: "raw_exec", command: ext, args: extArgs, shared: nodeArgs})
	})
	t.Run("external plugin under exec", func(t *testing.T) {
		runLifecycle(t, c, "/shared/fs", lcPlugin{id: "lc-ext-exec", driver: "exec", command: extTaskDir + "/" + filepath.Base(ext),
			args: extArgs, shared: nodeArgs})
	})
}

// lcTimes records how long each step took, and logs them as a table when
// the test ends (passed or not: the steps done so far).
type lcTimes struct {
	names []string
	took  []time.Duration
}

func (s *lcTimes) step(name string, f func()) {
	start := time.Now()
	f()
	s.names = append(s.names, name)
	s.took = append(s.took, time.Since(start))
}

func (s *lcTimes) table() string {
	var b strings.Builder
	var total time.Duration
	fmt.Fprintf(&b, "%-58s %10s\n", "step", "time")
	for i, n := range s.names {
		fmt.Fprintf(&b, "%-58s %10s\n", n, s.took[i].Round(time.Millisecond))
		total += s.took[i]
	}
	fmt.Fprintf(&b, "%-58s %10s", "total", total.Round(time.Millisecond))
	return b.String()
}

// lcTask is the plugin's task of type typ (monolith or node) with its state
// in state.
func lcTask(p lcPlugin, typ, state string) string {
	command, args := p.command, p.args(typ, state)
	if p.driver == "raw_exec" && p.command == berthBin {
		// Through a shell that writes its PID, for killLeftoverTasks.
		command, args = "/bin/sh", []string{"-c", "echo $$ > local/pid; exec " + berthBin + " " + strings.Join(args, " ")}
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	caps := ""
	if p.driver == "exec" {
		// The plugin mounts volumes.
		caps = `cap_add = ["SYS_ADMIN"]`
	}
	return fmt.Sprintf(`
    task "plugin" {
      driver = %q
      config {
        command = %q
        args    = [%s]
        %s
      }
      csi_plugin {
        id             = %q
        type           = %q
        health_timeout = "20s"
      }
      resources {
        cpu    = 50
        memory = 128
      }
      kill_timeout = "5s"
    }`, p.driver, command, strings.Join(quoted, ", "), caps, p.id, typ)
}

// lcPluginJob is the plugin's job: the monolith pinned to the first client
// and, when shared, a node instance pinned to the second.
func lcPluginJob(p lcPlugin, state string, c *csiCluster) string {
	group := func(name, node, task string) string {
		return fmt.Sprintf(`
  group %q {
    count = 1
%s
    restart {
      attempts = 2
      interval = "1m"
      delay    = "1s"
      mode     = "fail"
    }
%s
  }`, name, pinTo(node), task)
	}
	groups := group("monolith", c.clients[0].name, lcTask(p, "monolith", state))
	if p.shared {
		groups += group("node", c.clients[1].name, lcTask(p, "node", state))
	}
	return fmt.Sprintf("job %q {\n  type = \"service\"\n%s\n}\n", p.id+"-plugin", groups)
}

// apiSnapshot is the part of a snapshot the test reads.
type apiSnapshot struct {
	ID         string `json:"id"`
	PluginID   string `json:"plugin_id"`
	VolumeID   string `json:"volume_id"`
	ReadyToUse bool   `json:"ready_to_use"`
}

func runLifecycle(t *testing.T, c *csiCluster, sharedDir string, p lcPlugin) {
	s := c.servers[0]
	vol, writer, reader, pluginJob := p.id+"-vol", p.id+"-writer", p.id+"-reader", p.id+"-plugin"
	restored, restoredReader := vol+"-restored", p.id+"-restored"
	// While the cluster still runs: the consumers stop, and the plugin only
	// once their claims are freed (its node instance unpublishes and
	// unstages the volumes).
	t.Cleanup(func() {
		stopConsumersThenPlugin(t, s, []string{restoredReader, reader, writer}, []string{vol, restored}, pluginJob)
	})
	times := &lcTimes{}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// What the jobs' allocs say, before they are stopped.
		for _, job := range []string{pluginJob, writer, reader} {
			allocs, _ := s.jobAllocs(job)
			for _, a := range allocs {
				out, _ := s.cli("alloc", "status", a.ID)
				task := "user"
				if job == pluginJob {
					task = "plugin"
				}
				errOut, _ := s.cli("alloc", "logs", "-stderr", a.ID, task)
				var states struct {
					TaskStates json.RawMessage `json:"task_states"`
				}
				_ = s.getJSON("/v1/allocation/"+a.ID, &states)
				t.Logf("alloc %s of %s:\n%s\ntask states: %s\nstderr of %s:\n%s", a.ID, job, out, states.TaskStates, task, tail(errOut, 20))
			}
		}
	})
	t.Cleanup(func() { t.Logf("%s (plugin %s under %s):\n%s", t.Name(), p.id, p.driver, times.table()) })
	writeNode, readNode := c.clients[0], c.clients[1]
	if !p.shared {
		// Its volumes live on the monolith's node only.
		readNode = writeNode
		t.Logf("the plugin's storage is not shared (no %s): the reader runs on %s too", envExtNodeArgs, writeNode.name)
	}
	writeNodeID, readNodeID := c.nodeID(t, writeNode), c.nodeID(t, readNode)

	nodes := 1
	if p.shared {
		nodes = 2
	}
	times.step("plugin job run → plugin schedulable", func() {
		runJob(t, s, pluginJob, lcPluginJob(p, filepath.Join(sharedDir, p.id), c))
		waitPluginSchedulable(t, s, p.id, 1, nodes)
	})
	if p.provider != "" {
		if pl, err := s.plugin(p.id); err != nil || pl.Provider != p.provider {
			t.Fatalf("plugin %s: provider %q (%v), want %q", p.id, pl.Provider, err, p.provider)
		}
	}

	times.step("volume create", func() { createVolume(t, s, vol, p.id) })

	content := "written-on-" + writeNode.name + "-by-" + p.id
	var first apiAlloc
	times.step("writer job run on "+writeNode.name+" → file written", func() {
		runJob(t, s, writer, volumeUserJob(writer, vol, writeNode.name, "echo "+content+" > $BERTH_VOLUME_DATA/hello && echo wrote"))
		first = waitClaimedBy(t, s, writer, vol, writeNodeID)
		waitOutput(t, s, first.ID, "user", "wrote")
	})

	times.step("writer job stop → claim freed", func() {
		stopJob(t, s, writer)
		waitVolumeFreed(t, s, vol, time.Now(), freeBound)
	})

	var second apiAlloc
	times.step("reader job run on "+readNode.name+" → file read", func() {
		runJob(t, s, reader, volumeUserJob(reader, vol, readNode.name, "cat $BERTH_VOLUME_DATA/hello"))
		second = waitClaimedBy(t, s, reader, vol, readNodeID)
		waitOutput(t, s, second.ID, "user", content)
	})

	var snap apiSnapshot
	times.step("volume snapshot create", func() {
		out, err := s.cli("volume", "snapshot", "create", "-json", vol, p.id+"-snap")
		if err != nil {
			t.Fatalf("volume snapshot create %s: %v\n%s", vol, err, out)
		}
		if err := json.Unmarshal([]byte(out), &snap); err != nil || snap.ID == "" || snap.VolumeID != vol {
			t.Fatalf("volume snapshot create -json printed %s (%v): want a snapshot of %s", out, err, vol)
		}
	})
	times.step("volume snapshot list (by volume, by plugin)", func() {
		for _, by := range [][]string{{"-volume", vol}, {"-plugin", p.id}} {
			if ids := snapshotIDs(t, s, by...); !slices.Contains(ids, snap.ID) {
				t.Fatalf("volume snapshot list %s lists %v, not the snapshot %s", strings.Join(by, " "), ids, snap.ID)
			}
		}
	})

	times.step("volume expand to 8MiB, published on "+readNode.name, func() {
		out, err := s.cli("volume", "expand", "-json", "-capacity-min", "8MiB", vol)
		if err != nil {
			t.Fatalf("volume expand %s: %v\n%s", vol, err, out)
		}
		var resp apiExpand
		if err := json.Unmarshal([]byte(out), &resp); err != nil {
			t.Fatalf("volume expand -json printed %s: %v", out, err)
		}
		if resp.CapacityBytes < 8<<20 || resp.NodeExpansionPendingBytes != 0 {
			t.Fatalf("volume expand answered %+v: want at least 8MiB and nothing pending", resp)
		}
		if p.nodeExpansion && !resp.NodeExpansionRequired {
			t.Fatalf("volume expand answered %+v: the plugin's mount volumes need a node expansion", resp)
		}
		if resp.NodeExpansionRequired {
			if len(resp.Nodes) != 1 || resp.Nodes[0].NodeID != readNodeID || resp.Nodes[0].Error != "" || resp.Nodes[0].CapacityBytes < 8<<20 {
				t.Fatalf("volume expand's node rows %+v: want one, node %s (%s) expanded to at least 8MiB", resp.Nodes, readNodeID, readNode.name)
			}
		}
	})
	eventually(t, 10*time.Second, vol+"'s capacity recorded", func() error {
		v, err := s.volume(vol)
		if err != nil {
			return err
		}
		if v.Volume.CapacityBytes < 8<<20 {
			return fmt.Errorf("recorded capacity %d", v.Volume.CapacityBytes)
		}
		return nil
	})

	times.step("reader job stop → claim freed", func() {
		stopJob(t, s, reader)
		waitVolumeFreed(t, s, vol, time.Now(), freeBound)
	})

	times.step("volume create from the snapshot", func() {
		file := filepath.Join(t.TempDir(), "restored.hcl")
		if err := os.WriteFile(file, []byte(fmt.Sprintf(`
id           = %q
plugin_id    = %q
snapshot_id  = %q
capacity_min = "8MiB"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`, restored, p.id, snap.ID)), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := s.cli("volume", "create", file); err != nil {
			t.Fatalf("volume create %s from snapshot %s: %v\n%s", restored, snap.ID, err, out)
		}
	})
	times.step("restored volume's reader job run on "+readNode.name+" → file read, stop", func() {
		runJob(t, s, restoredReader, volumeUserJob(restoredReader, restored, readNode.name, "cat $BERTH_VOLUME_DATA/hello"))
		a := waitClaimedBy(t, s, restoredReader, restored, readNodeID)
		waitOutput(t, s, a.ID, "user", content)
		stopJob(t, s, restoredReader)
		waitVolumeFreed(t, s, restored, time.Now(), freeBound)
	})

	times.step("volume snapshot delete", func() {
		if out, err := s.cli("volume", "snapshot", "delete", p.id, snap.ID); err != nil {
			t.Fatalf("volume snapshot delete %s %s: %v\n%s", p.id, snap.ID, err, out)
		}
		if ids := snapshotIDs(t, s, "-plugin", p.id); slices.Contains(ids, snap.ID) {
			t.Fatalf("the deleted snapshot %s is still listed: %v", snap.ID, ids)
		}
	})

	times.step("volume delete (both)", func() {
		for _, id := range []string{restored, vol} {
			if out, err := s.cli("volume", "delete", id); err != nil {
				t.Fatalf("volume delete %s: %v\n%s", id, err, out)
			}
			eventually(t, 10*time.Second, id+" gone", func() error {
				v, err := s.volume(id)
				if err == nil {
					return fmt.Errorf("still there: %+v", v.Volume)
				}
				if !strings.Contains(err.Error(), "HTTP 404") {
					return err
				}
				return nil
			})
		}
	})

	times.step("plugin job stop → plugin gone", func() {
		stopJob(t, s, pluginJob)
		pluginGone(t, s, p.id)
	})
}

// snapshotIDs runs `volume snapshot list -json` with the flags given.
func snapshotIDs(t *testing.T, s *agent, flags ...string) []string {
	t.Helper()
	out, err := s.cli(append([]string{"volume", "snapshot", "list", "-json"}, flags...)...)
	if err != nil {
		t.Fatalf("volume snapshot list %s: %v\n%s", strings.Join(flags, " "), err, out)
	}
	var snaps []apiSnapshot
	if err := json.Unmarshal([]byte(out), &snaps); err != nil {
		t.Fatalf("volume snapshot list -json printed %s: %v", out, err)
	}
	ids := make([]string, len(snaps))
	for i, sn := range snaps {
		ids[i] = sn.ID
	}
	return ids
}

// waitClaimedBy waits until job has one alloc to run, running on node
// nodeID and holding the only claim of vol, in use; with a plugin that
// publishes through its controller (some do not: no attachment then) the
// volume is attached to that node only. It returns the alloc.
func waitClaimedBy(t *testing.T, s *agent, job, vol, nodeID string) apiAlloc {
	t.Helper()
	var alloc apiAlloc
	eventually(t, 60*time.Second, job+" running with "+vol+" in use on node "+nodeID, func() error {
		allocs, err := s.jobAllocs(job)
		if err != nil {
			return err
		}
		if len(allocs) != 1 || allocs[0].NodeID != nodeID || allocs[0].ClientStatus != "running" {
			return fmt.Errorf("allocs %+v, want one running on node %s", allocs, nodeID)
		}
		alloc = allocs[0]
		v, err := s.volume(vol)
		if err != nil {
			return err
		}
		if len(v.Claims) != 1 || v.Claims[0].AllocID != alloc.ID || v.Claims[0].State != "in-use" {
			return fmt.Errorf("claims %+v, want alloc %s's in use", v.Claims, alloc.ID)
		}
		for _, a := range v.Attachments {
			if a.NodeID != nodeID || a.State != "attached" {
				return fmt.Errorf("attachments %+v, want at most one, attached to node %s", v.Attachments, nodeID)
			}
		}
		return nil
	})
	return alloc
}
