package acceptance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The volume lifecycle acceptance tests, over real processes
// and the built-in hostpath plugin (bind mounts, so they run as root):
//
//   - TestVolumeDevAgent: a dev agent runs the plugin as a monolith in a
//     system job; a created volume is mounted by a service job that writes
//     a file; job stop frees the claim and the attachment and tears the
//     mounts down; a second job mounts the volume and reads the file.
//   - TestVolumeMove: three servers, two clients, the
//     plugin's controller in a service job and its node in a system job; a
//     single-node-writer volume follows its job from one client to the
//     other and back as the job is stopped and run again elsewhere (after
//     its claim is freed, or at once), updated to the other client, or
//     moved by a drain of the node running the plugin's controller. A
//     watcher checks all along that there is never more than one write
//     claim, one running consumer alloc, one live consumer process; every
//     stop frees the claim within a bound; each run reads what the runs
//     before it wrote on the other client.
//   - TestVolumeOperatorClaim: `berth volume claim` on a dev agent prints
//     the host path the volume is published at; the test writes through
//     it; `berth volume release` frees the claim and unpublishes (the path
//     is gone, nothing stays mounted). A read claim's path is read-only; a
//     job writing beside it (single-node-writer: readers and one writer on
//     a node) writes, and its claim is freed when it stops, so it can run
//     and write again. A job then reads the file.

// freeBound is how long a stopped user's claim may take to be freed (the
// client unpublishes and unstages, the leader unpublishes through the
// controller). It takes well under a second unloaded; the bound leaves room
// for -race on a shared machine.
const freeBound = 15 * time.Second

// volumeUserJob is a service job of one alloc that claims volume vol
// single-node-writer, mounted as "data", and runs script (sh) in its task
// "user" before sleeping; with node set, it is constrained to the node of
// that name. The task writes its PID where killLeftoverTasks and the
// watchers find it.
func volumeUserJob(id, vol, node, script string) string {
	constraint := ""
	if node != "" {
		constraint = fmt.Sprintf(`
  constraint {
    attribute = "${node.unique.name}"
    value     = %q
  }`, node)
	}
	return fmt.Sprintf(`
job %q {
  type = "service"
%s
  group "app" {
    count = 1
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
    task "user" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > local/pid; %s; exec sleep 3600"]
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
`, id, constraint, vol, script)
}

// waitVolumeUser waits until job has one alloc to run that is not in seen,
// running on node nodeID, holding the only claim of vol (write, in use)
// with the volume attached to that node only; it returns that alloc.
func waitVolumeUser(t *testing.T, s *agent, job, vol, nodeID string, seen []string) apiAlloc {
	t.Helper()
	var alloc apiAlloc
	eventually(t, 60*time.Second, job+" running with "+vol+" in use on node "+nodeID, func() error {
		allocs, err := s.jobAllocs(job)
		if err != nil {
			return err
		}
		var fresh []apiAlloc
		for _, a := range allocs {
			if a.DesiredStatus == "run" && !slices.Contains(seen, a.ID) {
				fresh = append(fresh, a)
			}
		}
		if len(fresh) != 1 {
			return fmt.Errorf("%d new allocs to run: %+v", len(fresh), allocs)
		}
		alloc = fresh[0]
		if alloc.NodeID != nodeID || alloc.ClientStatus != "running" {
			return fmt.Errorf("alloc %s is %s on node %s", alloc.ID, alloc.ClientStatus, alloc.NodeID)
		}
		v, err := s.volume(vol)
		if err != nil {
			return err
		}
		if len(v.Claims) != 1 || len(v.Attachments) != 1 {
			return fmt.Errorf("%d claims, %d attachments: %+v %+v", len(v.Claims), len(v.Attachments), v.Claims, v.Attachments)
		}
		cl, att := v.Claims[0], v.Attachments[0]
		if cl.AllocID != alloc.ID || cl.NodeID != nodeID || cl.Mode != "write" || cl.State != "in-use" {
			return fmt.Errorf("claim %+v, want alloc %s on node %s writing, in use", cl, alloc.ID, nodeID)
		}
		if att.NodeID != nodeID || att.State != "attached" {
			return fmt.Errorf("attachment %+v, want attached to node %s", att, nodeID)
		}
		return nil
	})
	return alloc
}

// waitVolumeFreed waits, at most bound, until vol has no claim and no
// attachment left, and returns how long that took from since.
func waitVolumeFreed(t *testing.T, s *agent, vol string, since time.Time, bound time.Duration) time.Duration {
	t.Helper()
	eventually(t, bound, vol+"'s claim and attachment freed", func() error {
		v, err := s.volume(vol)
		if err != nil {
			return err
		}
		if len(v.Claims) != 0 || len(v.Attachments) != 0 {
			return fmt.Errorf("claims %+v, attachments %+v", v.Claims, v.Attachments)
		}
		return nil
	})
	return time.Since(since)
}

// waitOutput waits until the task's stdout holds every line of want.
func waitOutput(t *testing.T, s *agent, alloc, task string, want ...string) {
	t.Helper()
	eventually(t, 30*time.Second, "output of alloc "+alloc, func() error {
		out, err := s.cli("alloc", "logs", alloc, task)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				return fmt.Errorf("no %q in %q", w, out)
			}
		}
		return nil
	})
}

// readPublished reads file name of the volume vol that alloc (or an
// operator's claim) has published on the client whose data directory is
// under dir, through the host path the task got.
func readPublished(dir, user, vol, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "data", "csi", "publish", user, vol, name))
	return string(b), err
}

// devVolume starts a dev agent running the hostpath plugin as a monolith
// in a system job and creates volume vol through it.
func devVolume(t *testing.T, vol string, jobs ...string) *agent {
	t.Helper()
	a := startDevAgent(t)
	// Each test stops its jobs when it ends, passed or not, while the agent
	// still runs, users before the plugin.
	t.Cleanup(func() { stopAllJobs(t, a, append(jobs, "hp-dev")...) })
	runJob(t, a, "hp-dev", csiJob("hp-dev", "system", 0, hostpathTask("hpd", "monolith", "monolith", t.TempDir())))
	waitPluginSchedulable(t, a, "hpd", 1, 1)
	createVolume(t, a, vol, "hpd")
	return a
}

func TestVolumeDevAgent(t *testing.T) {
	a := devVolume(t, "dv1", "writer", "reader")
	node := waitNodeStatus(t, a, "ready", 10*time.Second)

	runJob(t, a, "writer", volumeUserJob("writer", "dv1", "", "echo written-by-writer > $BERTH_VOLUME_DATA/hello"))
	writer := waitVolumeUser(t, a, "writer", "dv1", node.ID, nil)
	// The task wrote through the host path DESIGN names.
	eventually(t, 10*time.Second, "the writer's file under its publish path", func() error {
		got, err := readPublished(a.dir, writer.ID, "dv1", "hello")
		if err != nil {
			return err
		}
		if got != "written-by-writer\n" {
			return fmt.Errorf("hello holds %q", got)
		}
		return nil
	})

	stopped := time.Now()
	stopJob(t, a, "writer")
	took := waitVolumeFreed(t, a, "dv1", stopped, freeBound)
	t.Logf("job stop → claim freed: %s", took.Round(time.Millisecond))
	// Freed means torn down on the node: nothing of the volume is left
	// staged or published, and the writer's host path is gone.
	noMountsUnder(t, a.name+"'s CSI directory", filepath.Join(a.dir, "data", "csi"))
	if _, err := os.Lstat(filepath.Join(a.dir, "data", "csi", "publish", writer.ID, "dv1")); !os.IsNotExist(err) {
		t.Fatalf("the stopped writer's publish path is still there (%v)", err)
	}

	runJob(t, a, "reader", volumeUserJob("reader", "dv1", "", "cat $BERTH_VOLUME_DATA/hello"))
	reader := waitVolumeUser(t, a, "reader", "dv1", node.ID, nil)
	waitOutput(t, a, reader.ID, "user", "written-by-writer")

	// A purge removes the job and its versions while the alloc still holds
	// its claim: the release reads nothing of the job, so the claim is
	// freed as fast as after a plain stop (a detach report that needed the job
	// was refused, and the claim stuck until the alloc's GC).
	if out, err := a.cli("job", "stop", "-purge", "reader"); err != nil {
		t.Fatalf("job stop -purge reader: %v\n%s", err, out)
	}
	waitVolumeFreed(t, a, "dv1", time.Now(), freeBound)
	noMountsUnder(t, a.name+"'s CSI directory", filepath.Join(a.dir, "data", "csi"))
}

var (
	claimIDLine  = regexp.MustCompile(`(?m)^\s*Claim:\s+(\S+)\s*$`)
	hostPathLine = regexp.MustCompile(`(?m)^\s*Host path:\s+(\S+)\s*$`)
)

func TestVolumeOperatorClaim(t *testing.T) {
	a := devVolume(t, "ov1", "reader", "writer")
	node := waitNodeStatus(t, a, "ready", 10*time.Second)

	claimID, hostPath := operatorClaim(t, a, "ov1", "write")
	v, err := a.volume("ov1")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Claims) != 1 || v.Claims[0].ID != claimID || v.Claims[0].AllocID != "" || v.Claims[0].NodeID != node.ID ||
		v.Claims[0].Mode != "write" || v.Claims[0].State != "in-use" {
		t.Fatalf("after volume claim the claims are %+v, want operator's write claim %s in use on %s", v.Claims, claimID, node.ID)
	}
	if len(v.Attachments) != 1 || v.Attachments[0].State != "attached" || v.Attachments[0].NodeID != node.ID {
		t.Fatalf("after volume claim the attachments are %+v", v.Attachments)
	}

	// Write through the printed path: it is the volume, mounted.
	if err := os.WriteFile(filepath.Join(hostPath, "note"), []byte("written-by-operator\n"), 0o644); err != nil {
		t.Fatalf("writing through the printed host path: %v", err)
	}

	if out, err := a.cli("volume", "release", claimID); err != nil {
		t.Fatalf("volume release %s: %v\n%s", claimID, err, out)
	}
	waitVolumeFreed(t, a, "ov1", time.Now(), freeBound)
	// Released means unpublished and unstaged on the node: the printed
	// path is gone and nothing of the volume stays mounted.
	noMountsUnder(t, a.name+"'s CSI directory", filepath.Join(a.dir, "data", "csi"))
	if _, err := os.Lstat(strings.TrimSuffix(hostPath, "/")); !os.IsNotExist(err) {
		t.Fatalf("the released claim's host path %s is still there (%v)", hostPath, err)
	}
	if out, err := a.cli("volume", "release", claimID); err == nil || !strings.Contains(out, claimID) {
		t.Fatalf("releasing freed claim %s again: err %v, output:\n%s", claimID, err, out)
	}

	// A read claim publishes the volume read-only: the note is there, and
	// the kernel refuses a write.
	claimID, hostPath = operatorClaim(t, a, "ov1", "read")
	if got, err := os.ReadFile(filepath.Join(hostPath, "note")); err != nil || string(got) != "written-by-operator\n" {
		t.Fatalf("reading through a read claim's host path: %q (%v)", got, err)
	}
	if err := os.WriteFile(filepath.Join(hostPath, "other"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing through a read claim's host path: %v, want %v", err, syscall.EROFS)
	}
	// Single-node-writer: beside the reader, one writer on the same node.
	// The job's write shows through the operator's path (one staging of
	// the volume on the node); when the job stops, its claim is freed and
	// the reader's publish stays, staged still.
	runJob(t, a, "writer", volumeUserJob("writer", "ov1", "", "echo written-by-job > $BERTH_VOLUME_DATA/job"))
	eventually(t, 30*time.Second, "the job's write claim in use beside the operator's read claim", func() error {
		v, err := a.volume("ov1")
		if err != nil {
			return err
		}
		modes := map[string]string{}
		for _, c := range v.Claims {
			modes[c.Mode] = c.State
		}
		if len(v.Claims) != 2 || modes["read"] != "in-use" || modes["write"] != "in-use" {
			return fmt.Errorf("claims %+v", v.Claims)
		}
		return nil
	})
	eventually(t, 10*time.Second, "the job's file seen through the read claim's path", func() error {
		got, err := os.ReadFile(filepath.Join(hostPath, "job"))
		if err != nil {
			return err
		}
		if string(got) != "written-by-job\n" {
			return fmt.Errorf("job holds %q", got)
		}
		return nil
	})
	stopJob(t, a, "writer")
	eventually(t, freeBound, "the job's claim freed, the operator's kept", func() error {
		v, err := a.volume("ov1")
		if err != nil {
			return err
		}
		if len(v.Claims) != 1 || v.Claims[0].ID != claimID || v.Claims[0].State != "in-use" || len(v.Attachments) != 1 {
			return fmt.Errorf("claims %+v, attachments %+v", v.Claims, v.Attachments)
		}
		return nil
	})
	if got, err := os.ReadFile(filepath.Join(hostPath, "note")); err != nil || string(got) != "written-by-operator\n" {
		t.Fatalf("the read claim's host path after the writer left: %q (%v)", got, err)
	}
	// The writer's place is free again beside the reader: the job runs
	// again and writes.
	runJob(t, a, "writer", volumeUserJob("writer", "ov1", "", "echo written-again > $BERTH_VOLUME_DATA/job"))
	eventually(t, 30*time.Second, "the job's second write seen through the read claim's path", func() error {
		got, err := os.ReadFile(filepath.Join(hostPath, "job"))
		if err != nil {
			return err
		}
		if string(got) != "written-again\n" {
			return fmt.Errorf("job holds %q", got)
		}
		return nil
	})
	stopJob(t, a, "writer")
	eventually(t, freeBound, "the job's second claim freed, the operator's kept", func() error {
		v, err := a.volume("ov1")
		if err != nil {
			return err
		}
		if len(v.Claims) != 1 || v.Claims[0].ID != claimID {
			return fmt.Errorf("claims %+v", v.Claims)
		}
		return nil
	})
	if out, err := a.cli("volume", "release", claimID); err != nil {
		t.Fatalf("volume release %s: %v\n%s", claimID, err, out)
	}
	waitVolumeFreed(t, a, "ov1", time.Now(), freeBound)
	noMountsUnder(t, a.name+"'s CSI directory", filepath.Join(a.dir, "data", "csi"))

	// A job claims the volume next and reads what the operator wrote.
	runJob(t, a, "reader", volumeUserJob("reader", "ov1", "", "cat $BERTH_VOLUME_DATA/note"))
	reader := waitVolumeUser(t, a, "reader", "ov1", node.ID, nil)
	waitOutput(t, a, reader.ID, "user", "written-by-operator")
	stopJob(t, a, "reader")
	waitVolumeFreed(t, a, "ov1", time.Now(), freeBound)
}

// operatorClaim runs `berth volume claim -mode mode vol` on the node's own
// agent and returns the claim's ID and the host path it printed, which,
// asked of that agent, is absolute: <data_dir>/csi/publish/<claim>/<vol>/.
// The claim is in use when the command returns.
func operatorClaim(t *testing.T, a *agent, vol, mode string) (claimID, hostPath string) {
	t.Helper()
	out, err := a.cli("volume", "claim", "-mode", mode, "-timeout", "30s", vol)
	if err != nil {
		t.Fatalf("volume claim -mode %s %s: %v\n%s", mode, vol, err, out)
	}
	m, p := claimIDLine.FindStringSubmatch(out), hostPathLine.FindStringSubmatch(out)
	if m == nil || p == nil {
		t.Fatalf("volume claim printed no claim ID or host path:\n%s", out)
	}
	claimID, hostPath = m[1], p[1]
	if want := filepath.Join(a.dir, "data", "csi", "publish", claimID, vol) + "/"; hostPath != want {
		t.Fatalf("host path %q, want %q:\n%s", hostPath, want, out)
	}
	v, err := a.volume(vol)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Claims) != 1 || v.Claims[0].ID != claimID || v.Claims[0].Mode != mode || v.Claims[0].State != "in-use" {
		t.Fatalf("after volume claim -mode %s the claims of %s are %+v, want %s in use", mode, vol, v.Claims, claimID)
	}
	return claimID, hostPath
}

// exclusionWatch observes a single-node-writer volume and its one consumer
// job all along a test and records every moment it saw more than one
// writer: two write claims in the servers' state, two running allocs of
// the job, or two live consumer processes on the clients.
type exclusionWatch struct {
	mu           sync.Mutex
	observations int
	violations   []string
	stop         context.CancelFunc
	done         chan struct{}
}

func watchExclusion(s *agent, vol, job, task string, clients []*agent) *exclusionWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &exclusionWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			w.observe(s, vol, job, task, clients)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *exclusionWatch) observe(s *agent, vol, job, task string, clients []*agent) {
	var found []string
	if v, err := s.volume(vol); err == nil {
		var writers []apiClaim
		for _, c := range v.Claims {
			if c.Mode == "write" {
				writers = append(writers, c)
			}
		}
		if len(writers) > 1 {
			found = append(found, fmt.Sprintf("%d write claims of %s: %+v", len(writers), vol, writers))
		}
	}
	if allocs, err := s.jobAllocs(job); err == nil {
		var running []apiAlloc
		for _, a := range allocs {
			if a.ClientStatus == "running" {
				running = append(running, a)
			}
		}
		if len(running) > 1 {
			found = append(found, fmt.Sprintf("%d running allocs of %s: %+v", len(running), job, running))
		}
	}
	var live []string
	for _, cl := range clients {
		pids, _ := filepath.Glob(filepath.Join(cl.dir, "data", "alloc", "*", task, "local", "pid"))
		for _, f := range pids {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && alive(pid) {
				live = append(live, fmt.Sprintf("%s:%d", cl.name, pid))
			}
		}
	}
	if len(live) > 1 {
		found = append(found, fmt.Sprintf("%d live consumer processes: %v", len(live), live))
	}
	w.mu.Lock()
	w.observations++
	w.violations = append(w.violations, found...)
	w.mu.Unlock()
}

// end stops the watcher and fails the test for every violation it saw.
func (w *exclusionWatch) end(t *testing.T) {
	t.Helper()
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Errorf("two writers at once: %s", v)
	}
	if w.observations < 10 {
		t.Errorf("the exclusion watcher observed only %d times", w.observations)
	}
	t.Logf("exclusion watcher: %d observations, %d violations", w.observations, len(w.violations))
}

// The test's name is short: the clients' data directories are under
// t.TempDir, named after it, and a CSI plugin's socket path under a
// data_dir must fit a unix socket address (see startDevAgent).
func TestVolumeMove(t *testing.T) {
	// The plugin's state directory, the test's first t.TempDir: the
	// removal of every one is registered with it, so it runs after the
	// cleanup below, which runs after the agents stopped (cleanups run
	// last-registered first).
	state := t.TempDir()
	var c *csiCluster
	t.Cleanup(func() {
		if c != nil {
			for _, cl := range c.clients {
				unmountUnder(t, cl.dir)
			}
		}
	})
	c = startCSICluster(t)
	s := c.servers[0]
	t.Cleanup(func() { stopAllJobs(t, s, "mover", "hpm-node", "hpm-ctrl") })

	// The plugin: its controller on one client, a node instance on each,
	// sharing one state directory (one machine, one pool).
	runJob(t, s, "hpm-ctrl", csiJob("hpm-ctrl", "service", 1, hostpathTask("hpm", "controller", "controller", state)))
	runJob(t, s, "hpm-node", csiJob("hpm-node", "system", 0, hostpathTask("hpm", "node", "node", state)))
	eventually(t, 60*time.Second, "plugin hpm schedulable with 1/1 controllers and 2/2 nodes", func() error {
		p, err := s.plugin("hpm")
		if err != nil {
			return err
		}
		if err := wantCounts(p, 1, 1, 2, 2); err != nil {
			return err
		}
		if !p.Schedulable {
			return fmt.Errorf("plugin hpm not schedulable: %+v", p)
		}
		return nil
	})
	createVolume(t, s, "mv1", "hpm")

	w := watchExclusion(s, "mv1", "mover", "user", c.clients)
	defer w.end(t)

	// Each run is constrained to the other client than the run before,
	// prints what the runs before it wrote there and appends its own line.
	// The job leaves a client in one of three ways:
	//   - stopped, its claim freed, then run again;
	//   - stopped and at once run again: the new alloc waits for the claim
	//     and is placed once it is freed;
	//   - updated in place with the other client's constraint: the
	//     scheduler stops the old alloc and places the new one once the
	//     claim is freed.
	a, b := c.clients[0], c.clients[1]
	moves := []struct {
		to  *agent
		how string
	}{
		{a, "run"},
		{b, "stop, wait until freed, run"},
		{a, "stop, run"},
		{b, "update"},
		{a, "update"},
		{b, "stop, wait until freed, run"},
	}
	var seen, lines []string
	var from *agent
	// arrive waits for the mover's new alloc to hold the volume on to,
	// checks it read every line the runs before it wrote and wrote its
	// own, line, and that from (the client it left) has nothing mounted.
	arrive := func(to *agent, line, how string, began time.Time) {
		t.Helper()
		alloc := waitVolumeUser(t, s, "mover", "mv1", c.nodeID(t, to), seen)
		if from != nil && from != to {
			t.Logf("move (%s): %s → %s, in use after %s", how, from.name, to.name, time.Since(began).Round(time.Millisecond))
			noMountsUnder(t, from.name+"'s CSI volumes", filepath.Join(from.dir, "data", "csi", "volumes"))
		}
		seen = append(seen, alloc.ID)
		if len(lines) > 0 {
			waitOutput(t, s, alloc.ID, "user", lines...)
		}
		lines = append(lines, line)
		eventually(t, 10*time.Second, "run "+line+" wrote its line", func() error {
			got, err := readPublished(to.dir, alloc.ID, "mv1", "log")
			if err != nil {
				return err
			}
			if want := strings.Join(lines, "\n") + "\n"; got != want {
				return fmt.Errorf("log holds %q, want %q", got, want)
			}
			return nil
		})
		from = to
	}
	for i, m := range moves {
		line := fmt.Sprintf("run-%d-on-%s", i+1, m.to.name)
		spec := volumeUserJob("mover", "mv1", m.to.name, "cat $BERTH_VOLUME_DATA/log; echo "+line+" >> $BERTH_VOLUME_DATA/log")
		began := time.Now()
		switch m.how {
		case "stop, wait until freed, run":
			stopJob(t, s, "mover")
			took := waitVolumeFreed(t, s, "mv1", began, freeBound)
			t.Logf("move %d: job stop on %s → claim freed %s", i, from.name, took.Round(time.Millisecond))
			noMountsUnder(t, from.name+"'s CSI volumes", filepath.Join(from.dir, "data", "csi", "volumes"))
		case "stop, run":
			stopJob(t, s, "mover")
		}
		runJob(t, s, "mover", spec)
		arrive(m.to, line, m.how, began)
	}

	// A drain moves it too, off the node of the plugin's controller: the
	// mover, unconstrained, is placed there (the other client ineligible
	// meanwhile), then that node is drained. Its users stop before its
	// plugins (the controller among them), the claim is freed and the
	// mover's replacement holds the volume on the other client. Each run
	// names its node in its line, interpolated where it is placed.
	stopJob(t, s, "mover")
	waitVolumeFreed(t, s, "mv1", time.Now(), freeBound)
	p, err := s.plugin("hpm")
	if err != nil {
		t.Fatal(err)
	}
	drained, other := c.clients[0], c.clients[1]
	if _, ok := p.Controllers[c.nodeID(t, other)]; ok {
		drained, other = other, drained
	}
	if _, ok := p.Controllers[c.nodeID(t, drained)]; !ok {
		t.Fatalf("the controller of hpm runs on neither client: %+v", p.Controllers)
	}
	if out, err := s.cli("node", "eligibility", "-disable", c.nodeID(t, other)); err != nil {
		t.Fatalf("node eligibility -disable %s: %v\n%s", other.name, err, out)
	}
	runJob(t, s, "mover", volumeUserJob("mover", "mv1", "", "cat $BERTH_VOLUME_DATA/log; echo drained-run-on-${node.unique.name} >> $BERTH_VOLUME_DATA/log"))
	arrive(drained, "drained-run-on-"+drained.name, "stop, run unconstrained", time.Now())
	if out, err := s.cli("node", "eligibility", "-enable", c.nodeID(t, other)); err != nil {
		t.Fatalf("node eligibility -enable %s: %v\n%s", other.name, err, out)
	}
	began := time.Now()
	if out, err := s.cli("node", "drain", "-enable", "-yes", "-deadline", "1m", c.nodeID(t, drained)); err != nil {
		t.Fatalf("node drain -enable %s: %v\n%s", drained.name, err, out)
	}
	arrive(other, "drained-run-on-"+other.name, "drain", began)
	eventually(t, 60*time.Second, "hpm's controller moved to "+other.name, func() error {
		p, err := s.plugin("hpm")
		if err != nil {
			return err
		}
		if _, ok := p.Controllers[c.nodeID(t, other)]; !ok || p.ControllersHealthy != 1 {
			return fmt.Errorf("controllers %d healthy: %+v", p.ControllersHealthy, p.Controllers)
		}
		return nil
	})
	if out, err := s.cli("node", "drain", "-disable", "-yes", c.nodeID(t, drained)); err != nil {
		t.Fatalf("node drain -disable %s: %v\n%s", drained.name, err, out)
	}
	eventually(t, 60*time.Second, "hpm's node instance back on "+drained.name, func() error {
		p, err := s.plugin("hpm")
		if err != nil {
			return err
		}
		return wantCounts(p, 1, 1, 2, 2)
	})

	stopped := time.Now()
	stopJob(t, s, "mover")
	took := waitVolumeFreed(t, s, "mv1", stopped, freeBound)
	t.Logf("last job stop on %s → claim freed %s", from.name, took.Round(time.Millisecond))
	for _, cl := range c.clients {
		noMountsUnder(t, cl.name+"'s CSI volumes", filepath.Join(cl.dir, "data", "csi", "volumes"))
	}
}
