package acceptance

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The volume fault acceptance test: the cluster of TestVolumeClaims (three
// servers, two clients, the built-in hostpath plugin as a controller job on
// c1 and a node system job), with the plugin made slow on purpose at the
// calls the faults aim at (its --delay-after flag: the work is done, the
// reply held) and each held call leaving a marker file, so that "during X"
// is reached every time rather than by luck. Each fault has its own volume
// and a single-node-writer consumer pinned to c2:
//
//   - the leader is killed -9 while ControllerPublishVolume's reply is held
//     (the controller attached, the leader has not written it to raft);
//   - c2 is killed -9 while NodePublishVolume's reply is held, and
//     restarted;
//   - c2's node plugin is killed -9 while NodeStageVolume's reply is held;
//     its task restarts per the restart policy and the stage is retried;
//   - c2 is killed -9 after the volume is published and in use, and
//     restarted: the consumer task (same PID) and its mounts survive and
//     nothing is unpublished or unstaged (the plugin marks those calls too).
//
// Each ends, within 30s of the fault healing, with the claim in use by the
// running alloc (its file written through the mount) or freed, and the
// volume never has two write claims nor two publish targets. The short run
// holds replies; the long run also holds the calls before they run (the
// work not done yet when the fault hits) and adds three faults to each: c2
// killed during publish and kept down until the servers mark it down
// (clientDownDuringPublish), and c2 killed during the teardown's
// NodeUnstageVolume (clientKilledDuringUnstage), and the leader killed
// during ControllerUnpublishVolume (leaderKilledDuringDetach).
//
// What each fault ended in (on a dev machine, replies held): all four in use
// by the running alloc, the leader kill ~6s after the new leader (the retried
// ControllerPublishVolume, stage and publish, each held 2s), the client kill
// during publish ~2s after the restart, the plugin kill ~4s after the plugin
// ran again, the client kill after publish at once (the servers never saw a
// change).

// Delays the fault plugin runs with. Long enough for the test to see the
// marker and kill under -race on a loaded machine; every consumer start
// pays them once (the retries after a fault again).
const (
	faultDelay = "2s"
	// markDelay only makes a call leave a marker: the test watches for
	// unpublishes and unstages it must never see.
	markDelay = "1ms"
)

// faultRig is one fault plugin running on the cluster, and the faults
// played against it. Its jobs and volumes are named after the plugin.
type faultRig struct {
	plugin  string
	when    string // "after": replies held (--delay-after); "before": calls held (--delay)
	c       *csiCluster
	state   string // the plugin's state directory
	markers string // where held calls leave their markers
	c1, c2  *agent
}

func startFaultRig(t *testing.T, c *csiCluster, plugin, when string) *faultRig {
	t.Helper()
	state := t.TempDir()
	r := &faultRig{plugin: plugin, when: when, c: c, state: state + "/" + plugin, markers: state + "/markers", c1: c.clients[0], c2: c.clients[1]}
	flag := "--delay-after"
	if when == "before" {
		flag = "--delay"
	}
	delays := fmt.Sprintf(`"--delay-marker-dir", %q, "--log-level", "debug"`, r.markers)
	ctrl := delays + fmt.Sprintf(`, %q, "ControllerPublishVolume=%s"`, flag, faultDelay)
	if long() {
		// For leaderKilledDuringDetach. Not in the short run: the attach
		// reconciler serializes a plugin's calls, so every detach of the
		// cleanup would wait its turn behind the others' holds.
		ctrl += fmt.Sprintf(`, %q, "ControllerUnpublishVolume=%s"`, flag, faultDelay)
	}
	node := delays + fmt.Sprintf(`, %q, "NodeStageVolume=%s", %q, "NodePublishVolume=%s", "--delay", "NodeUnpublishVolume=%s", %q, "NodeUnstageVolume=%s"`,
		flag, faultDelay, flag, faultDelay, markDelay, flag, faultDelay)
	runJob(t, r.server(), plugin+"-ctrl", faultPluginJob(plugin+"-ctrl", "service", r.c1.name, faultPluginTask(plugin, "controller", r.state, ctrl)))
	runJob(t, r.server(), plugin+"-node", faultPluginJob(plugin+"-node", "system", "", faultPluginTask(plugin, "node", r.state, node)))
	waitPluginSchedulable(t, r.server(), plugin, 1, 2)
	return r
}

// server is a server that runs: the first of those not killed.
func (r *faultRig) server() *agent {
	for _, s := range r.c.servers {
		select {
		case <-s.exited:
		default:
			return s
		}
	}
	r.c.servers[0].t.Fatal("no server runs")
	return nil
}

// faultPluginTask is hostpathTask with extra arguments (HCL list items).
func faultPluginTask(pluginID, mode, stateDir, extra string) string {
	return fmt.Sprintf(`
    task "plugin" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > local/pid; exec \"$0\" \"$@\"", %q, "builtin", "csi-hostpath", "--endpoint", "${CSI_ENDPOINT}", "--node-id", "${node.unique.name}", "--mode", %q, "--state-dir", %q, %s]
      }
      csi_plugin {
        id             = %q
        type           = %q
        health_timeout = "20s"
      }
      resources {
        cpu    = 50
        memory = 64
      }
      kill_timeout = "5s"
    }`, berthBin, mode, stateDir, extra, pluginID, mode)
}

// faultPluginJob is csiJob, pinned to the client named node unless node is
// empty.
func faultPluginJob(id, typ, node, task string) string {
	return fmt.Sprintf(`
job %q {
  type = %q
  %s
  group "plugin" {
    restart {
      attempts = 2
      interval = "1m"
      delay    = "1s"
      mode     = "fail"
    }
%s
  }
}
`, id, typ, pinTo(node), task)
}

func pinTo(node string) string {
	if node == "" {
		return ""
	}
	return fmt.Sprintf(`constraint {
    attribute = "${node.unique.name}"
    value     = %q
  }`, node)
}

// faultConsumerJob is a single-node-writer consumer of vol pinned to node
// that writes "written-by-<id>" to hello in the volume and sleeps.
func faultConsumerJob(id, vol, node string) string {
	return fmt.Sprintf(`
job %q {
  type = "service"
  %s
  group "app" {
    volume "data" {
      type            = "csi"
      source          = %q
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "app" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > local/pid; echo written-by-%s > $BERTH_VOLUME_DATA/hello; exec sleep 600"]
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
`, id, pinTo(node), vol, id)
}

// createVolume creates single-node-writer volume id through the plugin and
// returns the plugin's ID of it.
func (r *faultRig) createVolume(t *testing.T, id string) string {
	t.Helper()
	return createVolume(t, r.server(), id, r.plugin)
}

// waitMarker waits until a call of method to volume ext on node ("controller"
// for the controller) is held, as the rig holds them, and returns its
// marker's name.
func (r *faultRig) waitMarker(t *testing.T, method, ext, node string) string {
	t.Helper()
	var name string
	eventually(t, 30*time.Second, method+" of "+ext+" held on "+node, func() error {
		m := r.markersOf(method, r.when, ext, node)
		if len(m) == 0 {
			return fmt.Errorf("no marker %s.%s.%s.%s.* in %s", method, r.when, ext, node, r.markers)
		}
		name = m[0]
		return nil
	})
	return name
}

func (r *faultRig) markersOf(method, when, ext, node string) []string {
	m, _ := filepath.Glob(filepath.Join(r.markers, fmt.Sprintf("%s.%s.%s.%s.*", method, when, ext, node)))
	return m
}

// outcome is how a fault ended: the claim in use by the running alloc, or
// freed.
type outcome struct {
	inUse bool
	alloc apiAlloc
	after time.Duration // from the fault healing
}

func (o outcome) String() string {
	if o.inUse {
		return fmt.Sprintf("in use by running alloc %s, %s after the fault healed", o.alloc.ID, o.after.Round(time.Millisecond))
	}
	return fmt.Sprintf("freed, %s after the fault healed", o.after.Round(time.Millisecond))
}

// settle waits at most 30s from healed for vol to end the fault: its one
// claim in use by a running alloc of job that wrote its file through the
// mount, or no claim and the job's allocs all stopped. Every look checks that
// the volume never has two write claims, nor two attachments, nor more
// than one publish target on c2.
func (r *faultRig) settle(t *testing.T, vol, ext, job string, healed time.Time) outcome {
	t.Helper()
	return r.settleBy(t, vol, ext, job, healed, healed.Add(30*time.Second))
}

// settleBy is settle with its own deadline.
func (r *faultRig) settleBy(t *testing.T, vol, ext, job string, healed, deadline time.Time) outcome {
	t.Helper()
	var o outcome
	eventually(t, time.Until(deadline), vol+" in use by the running alloc of "+job+" or freed", func() error {
		v, err := r.server().volume(vol)
		if err != nil {
			return err
		}
		writers := 0
		for _, cl := range v.Claims {
			if cl.Mode == "write" {
				writers++
			}
		}
		if writers > 1 || len(v.Attachments) > 1 {
			t.Fatalf("%s: %d write claims and %d attachments at once: %+v", vol, writers, len(v.Attachments), v)
		}
		if n := len(r.nodeRecord(t, r.c2.name, ext).Targets); n > 1 {
			t.Fatalf("%s published at %d targets on %s at once", vol, n, r.c2.name)
		}
		allocs, err := r.server().jobAllocs(job)
		if err != nil {
			return err
		}
		if len(v.Claims) == 0 {
			// Freed: the job's alloc placed and given up, none in its place
			// nor about to be (a replacement's evaluation pending or blocked).
			if len(allocs) == 0 || anyRunning(allocs) {
				return fmt.Errorf("no claim, allocs %+v", allocs)
			}
			var evals []apiEval
			if err := r.server().getJSON("/v1/job/"+job+"/evaluations", &evals); err != nil {
				return err
			}
			if i := slices.IndexFunc(evals, func(e apiEval) bool { return e.Status == "pending" || e.Status == "blocked" }); i >= 0 {
				return fmt.Errorf("no claim, allocs %+v, evaluation %+v still to place", allocs, evals[i])
			}
			o = outcome{after: time.Since(healed)}
			return nil
		}
		cl := v.Claims[0]
		if cl.State != "in-use" {
			return fmt.Errorf("claim %+v", cl)
		}
		i := slices.IndexFunc(allocs, func(a apiAlloc) bool { return a.ID == cl.AllocID })
		if i < 0 || allocs[i].ClientStatus != "running" {
			return fmt.Errorf("claim %+v, allocs %+v", cl, allocs)
		}
		if len(v.Attachments) != 1 || v.Attachments[0].State != "attached" || v.Attachments[0].NodeID != allocs[i].NodeID {
			return fmt.Errorf("attachments %+v, want one attached to %s", v.Attachments, allocs[i].NodeID)
		}
		if err := r.written(ext, job); err != nil {
			return err
		}
		o = outcome{inUse: true, alloc: allocs[i], after: time.Since(healed)}
		return nil
	})
	t.Logf("%s: %s", t.Name(), o)
	return o
}

// written checks the consumer's file in the volume's directory.
func (r *faultRig) written(ext, job string) error {
	b, err := os.ReadFile(filepath.Join(r.state, "volumes", ext, "data", "hello"))
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(string(b)); got != "written-by-"+job {
		return fmt.Errorf("hello holds %q, want written-by-%s", got, job)
	}
	return nil
}

// hpNodeRecord is what the plugin recorded of one volume on one node.
type hpNodeRecord struct {
	StagingPath string                     `json:"staging_path"`
	Targets     map[string]json.RawMessage `json:"targets"`
}

// nodeRecord reads the plugin's record of volume ext on node; a missing
// record is an empty one (nothing staged, nothing published).
func (r *faultRig) nodeRecord(t *testing.T, node, ext string) hpNodeRecord {
	t.Helper()
	var rec hpNodeRecord
	b, err := os.ReadFile(filepath.Join(r.state, "nodes", node, "volumes", ext+".json"))
	if os.IsNotExist(err) {
		return rec
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("plugin record of %s on %s: %v", ext, node, err)
	}
	return rec
}

// mounted reports whether path is a mount point in this mount namespace.
func mounted(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Field 5 is the mount point, with spaces and the like octal-escaped.
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == path {
			return true
		}
	}
	return false
}

// nodePluginPID is the PID of the node plugin on cl (its task wrote it).
func (r *faultRig) nodePluginPID(t *testing.T, cl *agent) (string, int) {
	t.Helper()
	allocs, err := r.server().jobAllocs(r.plugin + "-node")
	if err != nil {
		t.Fatal(err)
	}
	nodeID := r.c.nodeID(t, cl)
	for _, a := range allocs {
		if a.NodeID == nodeID && a.DesiredStatus == "run" {
			pid, err := taskPID(cl, a.ID, "plugin")
			if err != nil {
				t.Fatalf("node plugin PID on %s: %v", cl.name, err)
			}
			return a.ID, pid
		}
	}
	t.Fatalf("no node plugin alloc on %s: %+v", cl.name, allocs)
	return "", 0
}

// cleanup stops the consumers, waits (bounded) for their volumes to be
// released, then stops the plugin: stopped together, the node plugin could
// go before it unpublished. Mounts of the plugin left on the clients after
// that are a failure of their own (and unmounted, so the temporary
// directories can go).
func (r *faultRig) cleanup() {
	t := r.c.servers[0].t
	s := r.server()
	stopAllJobs(t, s, r.plugin+"-a", r.plugin+"-b", r.plugin+"-c", r.plugin+"-d", r.plugin+"-e", r.plugin+"-f", r.plugin+"-g")
	deadline := time.Now().Add(30 * time.Second)
	for _, vol := range []string{r.plugin + "-a", r.plugin + "-b", r.plugin + "-c", r.plugin + "-d", r.plugin + "-e", r.plugin + "-f", r.plugin + "-g"} {
		for time.Now().Before(deadline) {
			v, err := s.volume(vol)
			if err != nil || len(v.Claims) == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	stopAllJobs(t, s, r.plugin+"-node", r.plugin+"-ctrl")
	for _, cl := range r.c.clients {
		for _, m := range mountsStrictlyUnder(t, filepath.Join(cl.dir, "data", "csi", "volumes", r.plugin)) {
			if !t.Failed() {
				t.Errorf("%s still mounted after every job stopped", m)
			}
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", m, err)
			}
		}
	}
}

// mountsStrictlyUnder lists the mount points under dir (not dir itself), deepest first.
func mountsStrictlyUnder(t *testing.T, dir string) []string {
	t.Helper()
	all, err := mountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range all {
		if p != dir {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// leader is the server the servers agree leads.
func (r *faultRig) leader(t *testing.T) *agent {
	t.Helper()
	var addr string
	eventually(t, 30*time.Second, "servers agree on a leader", func() (err error) {
		addr, err = agreedLeader(r.c.servers)
		return err
	})
	i := slices.IndexFunc(r.c.servers, func(s *agent) bool { return s.rpcAddr == addr })
	if i < 0 {
		t.Fatalf("leader %s is not one of our servers", addr)
	}
	return r.c.servers[i]
}

// killLeader kills old, the leader, with SIGKILL and returns when the
// survivors agree on a new one: the fault healed.
func (r *faultRig) killLeader(t *testing.T, old *agent) time.Time {
	t.Helper()
	old.kill()
	survivors := without(r.c.servers, old)
	eventually(t, 30*time.Second, "survivors elect a new leader", func() error {
		l, err := agreedLeader(survivors)
		if err == nil && l == old.rpcAddr {
			return fmt.Errorf("survivors still follow the killed leader")
		}
		return err
	})
	return time.Now()
}

// restartServer starts a killed server again, as a follower, so that the
// later faults have three servers.
func (r *faultRig) restartServer(t *testing.T, old *agent) {
	t.Helper()
	old.start()
	eventually(t, 30*time.Second, "three servers agree on a leader", func() error {
		_, err := agreedLeader(r.c.servers)
		return err
	})
}

// restartClient kills cl with SIGKILL and starts it again at once.
func restartClient(cl *agent) time.Time {
	cl.kill()
	cl.start()
	return time.Now()
}

// TestVolumeFaults holds the plugin's replies (the work done, the caller
// unaware): plugin hpf. The long run (BERTH_ACCEPTANCE_LONG) also holds the
// calls before they run: plugin hpb, on the same cluster (the agents' data
// directories are named after the test, and a longer name would push the
// plugin sockets past the 107 bytes a unix socket address holds).
func TestVolumeFaults(t *testing.T) {
	c := startCSICluster(t)
	rigs := []*faultRig{startFaultRig(t, c, "hpf", "after")}
	// Deferred, not a t.Cleanup: a client restarted by a fault registers
	// its stop as a cleanup, which would run first and leave its volumes
	// to a client that is gone.
	defer rigs[0].cleanup()
	if long() {
		rigs = append(rigs, startFaultRig(t, c, "hpb", "before"))
		defer rigs[1].cleanup()
	}
	for _, r := range rigs {
		name := map[string]string{"after": "replies held", "before": "calls held"}[r.when]
		t.Run(name, r.run)
	}
}

func (r *faultRig) run(t *testing.T) {
	t.Run("leader killed during attach", func(t *testing.T) {
		id := r.plugin + "-a"
		ext := r.createVolume(t, id)
		runJob(t, r.server(), id, faultConsumerJob(id, id, r.c2.name))
		// The controller holds ControllerPublishVolume (replies held: the
		// volume is attached): the leader's reconciler has called and not
		// written the attachment.
		r.waitMarker(t, "ControllerPublishVolume", ext, "controller")
		old := r.leader(t)
		if v, err := r.server().volume(id); err != nil || slices.ContainsFunc(v.Attachments, func(a apiAttachment) bool { return a.State == "attached" }) {
			t.Fatalf("before the kill %s's attachments are %+v (%v): the fault came too late", id, v.Attachments, err)
		}
		healed := r.killLeader(t, old)
		r.settle(t, id, ext, id, healed)
		r.restartServer(t, old)
	})

	t.Run("client killed during publish", func(t *testing.T) {
		id := r.plugin + "-b"
		ext := r.createVolume(t, id)
		runJob(t, r.server(), id, faultConsumerJob(id, id, r.c2.name))
		// The plugin holds NodePublishVolume (replies held: the target is
		// mounted, c2 has not heard so).
		r.waitMarker(t, "NodePublishVolume", ext, r.c2.name)
		healed := restartClient(r.c2)
		r.settle(t, id, ext, id, healed)
	})

	// Long only: see clientDownDuringPublish, clientKilledDuringUnstage and
	// leaderKilledDuringDetach.
	if long() {
		t.Run("client down past its heartbeat during publish", r.clientDownDuringPublish)
		t.Run("client killed during unstage", r.clientKilledDuringUnstage)
		t.Run("leader killed during detach", r.leaderKilledDuringDetach)
	}

	t.Run("plugin killed during stage", func(t *testing.T) {
		id := r.plugin + "-c"
		ext := r.createVolume(t, id)
		runJob(t, r.server(), id, faultConsumerJob(id, id, r.c2.name))
		r.waitMarker(t, "NodeStageVolume", ext, r.c2.name)
		alloc, pid := r.nodePluginPID(t, r.c2)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 node plugin %d: %v", pid, err)
		}
		// Healed when the plugin task runs again, a new process.
		eventually(t, 30*time.Second, "node plugin on c2 restarted", func() error {
			got, err := taskPID(r.c2, alloc, "plugin")
			if err != nil || got == pid || !alive(got) {
				return fmt.Errorf("plugin PID %d (%v), was %d", got, err, pid)
			}
			return nil
		})
		healed := time.Now()
		r.settle(t, id, ext, id, healed)
	})

	t.Run("client killed after publish", func(t *testing.T) {
		id := r.plugin + "-d"
		ext := r.createVolume(t, id)
		runJob(t, r.server(), id, faultConsumerJob(id, id, r.c2.name))
		start := time.Now()
		o := r.settleBy(t, id, ext, id, start, start.Add(60*time.Second))
		if !o.inUse {
			t.Fatalf("%s freed without a fault", id)
		}
		pid, err := taskPID(r.c2, o.alloc.ID, "app")
		if err != nil {
			t.Fatal(err)
		}
		before := r.nodeRecord(t, r.c2.name, ext)
		dataDir := filepath.Join(r.c2.dir, "data")
		staging := filepath.Join(dataDir, "csi", "volumes", r.plugin, "staging", id)
		target := filepath.Join(dataDir, "csi", "volumes", r.plugin, "publish", o.alloc.ID, id)
		if before.StagingPath != staging || len(before.Targets) != 1 || before.Targets[target] == nil {
			t.Fatalf("plugin record of %s on c2: %+v, want staged at %s and published at %s", id, before, staging, target)
		}
		if !mounted(t, staging) || !mounted(t, target) {
			t.Fatalf("%s mounted at staging %v, target %v; want both", id, mounted(t, staging), mounted(t, target))
		}

		nodeAlloc, _ := r.nodePluginPID(t, r.c2)
		killed := time.Now()
		logFrom := fileSize(t, r.c2.logPath)
		healed := restartClient(r.c2)
		after := r.settle(t, id, ext, id, healed)
		if !after.inUse || after.alloc.ID != o.alloc.ID {
			t.Fatalf("after c2's restart %s is %s, want still in use by %s", id, after, o.alloc.ID)
		}
		// The restarted client found its node plugin again: it has restored
		// its allocs and swept the volumes no alloc holds.
		eventually(t, 30*time.Second, "c2's node plugin found after the restart", func() error {
			return pluginFoundSince(r.server(), nodeAlloc, killed)
		})
		if !alive(pid) {
			t.Fatalf("consumer task %d died with its client", pid)
		}
		if got, err := taskPID(r.c2, o.alloc.ID, "app"); err != nil || got != pid {
			t.Fatalf("consumer PID after the restart %d (%v), want %d", got, err, pid)
		}
		if !mounted(t, staging) || !mounted(t, target) {
			t.Fatalf("after c2's restart %s mounted at staging %v, target %v; want both", id, mounted(t, staging), mounted(t, target))
		}
		if b, err := os.ReadFile(filepath.Join(target, "hello")); err != nil || strings.TrimSpace(string(b)) != "written-by-"+id {
			t.Fatalf("hello through the publish target after the restart: %q (%v)", b, err)
		}
		rec := r.nodeRecord(t, r.c2.name, ext)
		if rec.StagingPath != staging || len(rec.Targets) != 1 || rec.Targets[target] == nil {
			t.Fatalf("plugin record of %s on c2 after the restart: %+v, was %+v", id, rec, before)
		}
		// The sweep decides before the restored runners run, so before the
		// plugin event above: had it found the volume's use orphaned, it would
		// have said so by now.
		if b, err := os.ReadFile(r.c2.logPath); err != nil {
			t.Fatal(err)
		} else if i := strings.Index(string(b[logFrom:]), "tearing down a volume use"); i >= 0 {
			t.Fatalf("c2's restart swept a volume use: %s", b[logFrom+int64(i):min(int64(len(b)), logFrom+int64(i)+300)])
		}
		for _, m := range []string{"NodeUnpublishVolume", "NodeUnstageVolume"} {
			if got := r.markersOf(m, "*", ext, r.c2.name); len(got) != 0 {
				t.Fatalf("%s had %s calls across c2's restart: %v", id, m, got)
			}
		}
	})
}

// pluginFoundSince is nil once the plugin task of alloc has a "Plugin
// became healthy" event of a client restart that occurred after since
// (the newest events are kept, so a count would stall at the cap).
func pluginFoundSince(s *agent, alloc string, since time.Time) error {
	var a struct {
		TaskStates map[string]struct {
			Events []struct {
				Type       string    `json:"type"`
				Message    string    `json:"message"`
				OccurredAt time.Time `json:"occurred_at"`
			} `json:"events"`
		} `json:"task_states"`
	}
	if err := s.getJSON("/v1/allocation/"+alloc, &a); err != nil {
		return err
	}
	events := a.TaskStates["plugin"].Events
	for _, e := range events {
		if e.Type == "Plugin became healthy" && strings.Contains(e.Message, "after a client restart") && e.OccurredAt.After(since) {
			return nil
		}
	}
	return fmt.Errorf("no healthy-after-restart event since %s in %+v", since.Format(time.RFC3339Nano), events)
}

// clientDownDuringPublish kills c2 during publish and keeps it down until
// the servers mark it down: its alloc is lost and the claim freed while
// the volume is published there. c2 comes back; the replacement alloc gets
// the volume and the lost alloc's target is unpublished.
func (r *faultRig) clientDownDuringPublish(t *testing.T) {
	id := r.plugin + "-e"
	ext := r.createVolume(t, id)
	runJob(t, r.server(), id, faultConsumerJob(id, id, r.c2.name))
	r.waitMarker(t, "NodePublishVolume", ext, r.c2.name)
	allocs, err := r.server().jobAllocs(id)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("%s allocs %+v (%v), want one", id, allocs, err)
	}
	lost := allocs[0]
	nodeID := r.c.nodeID(t, r.c2)
	r.c2.kill()
	eventually(t, 30*time.Second, "c2 down", func() error {
		ns, err := r.server().nodes()
		if err != nil {
			return err
		}
		for _, n := range ns {
			if n.ID == nodeID && n.Status != "down" {
				return fmt.Errorf("c2 is %s", n.Status)
			}
		}
		return nil
	})
	r.c2.start()
	healed := time.Now()
	o := r.settle(t, id, ext, id, healed)
	if !o.inUse || o.alloc.ID == lost.ID {
		t.Fatalf("%s after c2 came back: %s, want in use by a replacement of %s", id, o, lost.ID)
	}
	dataDir := filepath.Join(r.c2.dir, "data")
	target := filepath.Join(dataDir, "csi", "volumes", r.plugin, "publish", o.alloc.ID, id)
	lostTarget := filepath.Join(dataDir, "csi", "volumes", r.plugin, "publish", lost.ID, id)
	if rec := r.nodeRecord(t, r.c2.name, ext); len(rec.Targets) != 1 || rec.Targets[target] == nil {
		t.Fatalf("plugin record of %s on c2: targets %v, want only %s", id, rec.Targets, target)
	}
	if mounted(t, lostTarget) {
		t.Fatalf("the lost alloc's target %s is still mounted", lostTarget)
	}
}

// clientKilledDuringUnstage stops a consumer and kills c2 while its
// NodeUnstageVolume is held, then restarts it: the restarted client
// finishes the teardown it was in the middle of and the claim is freed,
// nothing left mounted or staged.
func (r *faultRig) clientKilledDuringUnstage(t *testing.T) {
	id := r.plugin + "-f"
	ext := r.createVolume(t, id)
	runJob(t, r.server(), id, faultConsumerJob(id, id, r.c2.name))
	start := time.Now()
	o := r.settleBy(t, id, ext, id, start, start.Add(60*time.Second))
	if !o.inUse {
		t.Fatalf("%s freed without a fault", id)
	}
	stopJob(t, r.server(), id)
	r.waitMarker(t, "NodeUnstageVolume", ext, r.c2.name)
	healed := restartClient(r.c2)
	if o := r.settle(t, id, ext, id, healed); o.inUse {
		t.Fatalf("%s after its job stopped: %s, want freed", id, o)
	}
	dataDir := filepath.Join(r.c2.dir, "data")
	staging := filepath.Join(dataDir, "csi", "volumes", r.plugin, "staging", id)
	target := filepath.Join(dataDir, "csi", "volumes", r.plugin, "publish", o.alloc.ID, id)
	if mounted(t, staging) || mounted(t, target) {
		t.Fatalf("%s still mounted after the teardown: staging %v, target %v", id, mounted(t, staging), mounted(t, target))
	}
	if rec := r.nodeRecord(t, r.c2.name, ext); rec.StagingPath != "" || len(rec.Targets) != 0 {
		t.Fatalf("plugin record of %s on c2 after the teardown: %+v, want nothing staged or published", id, rec)
	}
}

// leaderKilledDuringDetach stops a consumer and kills the leader while the
// controller holds ControllerUnpublishVolume (the leader's reaper has
// called and not written the detach): the new leader finishes it and the
// claim is freed, the controller's attachment gone.
func (r *faultRig) leaderKilledDuringDetach(t *testing.T) {
	id := r.plugin + "-g"
	ext := r.createVolume(t, id)
	runJob(t, r.server(), id, faultConsumerJob(id, id, r.c2.name))
	start := time.Now()
	if o := r.settleBy(t, id, ext, id, start, start.Add(60*time.Second)); !o.inUse {
		t.Fatalf("%s freed without a fault", id)
	}
	stopJob(t, r.server(), id)
	r.waitMarker(t, "ControllerUnpublishVolume", ext, "controller")
	old := r.leader(t)
	if v, err := r.server().volume(id); err != nil || len(v.Claims) == 0 {
		t.Fatalf("before the kill %s's claims are %+v (%v): the fault came too late", id, v.Claims, err)
	}
	healed := r.killLeader(t, old)
	if o := r.settle(t, id, ext, id, healed); o.inUse {
		t.Fatalf("%s after its job stopped: %s, want freed", id, o)
	}
	if v, err := r.server().volume(id); err != nil || len(v.Attachments) != 0 {
		t.Fatalf("%s freed with attachments %+v (%v)", id, v.Attachments, err)
	}
	var rec struct {
		Attachments map[string]json.RawMessage `json:"attachments"`
	}
	b, err := os.ReadFile(filepath.Join(r.state, "volumes", ext, "volume.json"))
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil || len(rec.Attachments) != 0 {
		t.Fatalf("the controller's record of %s: attachments %v (%v), want none", id, rec.Attachments, err)
	}
	r.restartServer(t, old)
}
