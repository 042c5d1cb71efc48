package acceptance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// The full disk acceptance test: one server, and one
// client whose data dir is a small tmpfs the test mounts (as root; under
// CI=true a test that cannot fails), with raw_exec and the built-in
// hostpath storage adapter, its state in the client's data dir too. A
// few tasks run ("keep1".."keep4"), and another ("vol") holds a claim on a hostpath
// volume. The tmpfs is filled to the last byte; then new jobs
// ("press1", ...) are run until a state DB write of the client has failed
// (a task event with reason state-not-persisted, or ENOSPC on state.db in
// its log) — the test fails if none does, as a run whose writes all got
// through checks nothing. "vol" is stopped, and the client restarted on
// the full disk:
//
//   - the kept tasks are recovered, the same processes, running on the servers (the
//     client used to write again the handle it had just read, fail, and
//     kill the task while the servers showed it running);
//   - then the space is freed, and without a restart everything
//     converges: the claim of "vol" is freed, and processes and records
//     agree — every alloc the servers show running has its process, every
//     process of the test's tasks on the node belongs to an alloc the
//     servers show running.
//
// Against the build before the item's fixes (eb7418d) it fails each run:
// the restarted client kills the kept tasks (it wrote again the handle it
// had read), or a press job's process runs while the servers show its
// alloc failed. Which other writes fail on the full disk varies from run
// to run (the state DB reuses its free pages; the task's teardown frees a
// few): the teardown
// may wait on NodeUnpublishVolume (the plugin cannot record it) or get
// through and leave ControllerUnpublishVolume answering Internal, which
// used to stay unretried for good. The unit tests pin each of those
// (host/server TestDetachRetriesAFinalUnpublishUntilItSucceeds, taskdrivers
// TestRecoverTaskOfAStoredHandleNeedsNoWrite, the allocrunner's and
// volumehooks' full store tests); this test checks they add up on a real
// full disk. The long run (BERTH_ACCEPTANCE_LONG) keeps the disk full for
// 30s more, past several retries of each step, before freeing it.
func TestFullClientDiskConverges(t *testing.T) {
	testutil.RequireRoot(t, "mounts a tmpfs for the client's data dir")
	s := newAgent(t, "fs1", freePorts(t), `
server {
  enabled          = true
  bootstrap_expect = 1
  heartbeat_ttl    = "10s"
  heartbeat_grace  = "10s"
}`)
	s.start()
	c := newAgent(t, "fc1", freePorts(t), fmt.Sprintf(`
client {
  enabled = true
  servers = [%q]
}
plugin "raw_exec" {
  config { enabled = true }
}
plugin "hostpath" {
  type = "csi"
}`, s.rpcAddr))
	data := filepath.Join(c.dir, "data")
	mountTmpfs(t, data, "48m")
	// Last-registered first: the agent stops (registered by start), its
	// leftover tasks are killed, then the volume's mounts and the tmpfs
	// go, before the directory is removed.
	t.Cleanup(func() { unmountUnder(t, c.dir) })
	t.Cleanup(func() { killLeftoverTasks(c) })
	c.start()
	waitPluginSchedulable(t, s, "hostpath", 1, 1)
	createVolume(t, s, "fvol", "hostpath")
	// Several tasks to recover: each recovery is a state DB transaction,
	// and the DB's free pages (which a full disk leaves writable) run out
	// after a few.
	keepJobs := []string{"keep1", "keep2", "keep3", "keep4"}
	for _, job := range keepJobs {
		runJob(t, s, job, fullDiskJob(job, ""))
	}
	runJob(t, s, "vol", fullDiskJob("vol", "fvol"))
	keep := map[string]int{} // alloc → PID
	for _, job := range keepJobs {
		pid := runningPID(t, s, c, job)
		keep[onlyAlloc(t, s, job)] = pid
	}
	vol := runningPID(t, s, c, "vol")
	waitClaim(t, s, "fvol", "in-use")

	fill := filepath.Join(data, "fill")
	fillDisk(t, fill)
	// Make it bite: new jobs are state DB writes (the alloc's record,
	// its tasks' states), which use up the free pages of the DB a full
	// disk leaves writable, until one fails. The test goes no further
	// before it has: a run whose writes all got through checks nothing.
	press := biteStateDB(t, s, c, fileSize(t, c.logPath))
	stopJob(t, s, "vol")
	eventually(t, 30*time.Second, "vol's task killed", func() error {
		if alive(vol) {
			return fmt.Errorf("pid %d of vol still runs", vol)
		}
		return nil
	})
	c.stop()
	logged := fileSize(t, c.logPath)
	c.start()
	waitNodeStatus(t, s, "ready", 30*time.Second)

	// The full disk: the tasks are recovered, not killed.
	outcomes := map[string]string{}
	eventually(t, 30*time.Second, "the restarted client's word on each kept task", func() error {
		b, err := os.ReadFile(c.logPath)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b[logged:]), "\n") {
			for alloc := range keep {
				if strings.Contains(line, "alloc_id="+alloc) &&
					(strings.Contains(line, "task recovered") || strings.Contains(line, "could not recover task")) {
					outcomes[alloc] = line
				}
			}
		}
		if len(outcomes) != len(keep) {
			return fmt.Errorf("the recovery of %d of %d allocs logged", len(outcomes), len(keep))
		}
		return nil
	})
	for alloc, line := range outcomes {
		if !strings.Contains(line, "task recovered") {
			t.Errorf("alloc %s after the restart on the full disk: %s", alloc, line)
		}
	}
	eventually(t, 30*time.Second, "the kept tasks running with the same processes after the restart on the full disk", func() error {
		return keptRunning(s, keepJobs, keep)
	})
	if long() {
		time.Sleep(30 * time.Second)
	}

	if a, err := attachmentOf(s, "fvol"); err == nil {
		t.Logf("fvol's attachment on the full disk: %+v", a)
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	eventually(t, 90*time.Second, "fvol's claim freed after the disk has room", func() error {
		v, err := s.volume("fvol")
		if err != nil {
			return err
		}
		if len(v.Claims) != 0 || len(v.Attachments) != 0 {
			return fmt.Errorf("claims %+v, attachments %+v", v.Claims, v.Attachments)
		}
		return nil
	})
	t.Logf("fvol freed %s after the disk had room", time.Since(freed).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, "processes and records agree", func() error {
		return processesAgree(s, c, append(append([]string{"vol"}, keepJobs...), press...))
	})
	if err := keptRunning(s, keepJobs, keep); err != nil {
		t.Fatal(err)
	}
	stopAllJobs(t, s, append(keepJobs, press...)...)
}

// biteStateDB runs jobs ("press1", ...) on the full disk until a state DB
// write of the client fails: a task event says reason
// state-not-persisted, or the client logs ENOSPC writing its state.db
// after offset logged (other writes, a driver's, do not count). It fails
// the test if none has after maxPress jobs, and returns the jobs it ran.
func biteStateDB(t *testing.T, s, c *agent, logged int64) []string {
	t.Helper()
	const maxPress = 15
	var jobs []string
	for i := 1; i <= maxPress; i++ {
		job := fmt.Sprintf("press%d", i)
		jobs = append(jobs, job)
		runJob(t, s, job, fullDiskJob(job, ""))
		var bit string
		// An alloc whose end could not be written stays pending on the
		// servers: the wait is for a failed write or the alloc past pending.
		eventually(t, 60*time.Second, job+" past pending, or a state DB write failed", func() error {
			var err error
			if bit, err = writeFailed(s, c, jobs, logged); err != nil || bit != "" {
				return err
			}
			allocs, err := s.jobAllocs(job)
			if err != nil {
				return err
			}
			if len(allocs) != 1 || allocs[0].ClientStatus == "pending" {
				return fmt.Errorf("%s's allocs %+v, want one past pending", job, allocs)
			}
			return nil
		})
		if bit != "" {
			t.Logf("a state DB write failed on the full disk after %d jobs: %s", i, bit)
			return jobs
		}
	}
	t.Fatalf("no state DB write of the client failed after %d new jobs on the full disk (no task event with reason %s, no %q in its log): the test checks nothing",
		maxPress, "state-not-persisted", syscall.ENOSPC.Error())
	return nil
}

// writeFailed returns what shows that a client state DB write failed (a
// task event of jobs' allocs, or a line of c's log after offset logged),
// "" when nothing does yet.
func writeFailed(s, c *agent, jobs []string, logged int64) (string, error) {
	for _, job := range jobs {
		allocs, err := s.jobAllocs(job)
		if err != nil {
			return "", err
		}
		for _, a := range allocs {
			var full struct {
				TaskStates map[string]struct {
					Events []struct {
						Type    string            `json:"type"`
						Message string            `json:"message"`
						Details map[string]string `json:"details"`
					} `json:"events"`
				} `json:"task_states"`
			}
			if err := s.getJSON("/v1/allocation/"+a.ID, &full); err != nil {
				return "", err
			}
			for _, ts := range full.TaskStates {
				for _, e := range ts.Events {
					if e.Details["reason"] == "state-not-persisted" {
						return fmt.Sprintf("alloc %s of %s: event %s: %s", a.ID, job, e.Type, e.Message), nil
					}
				}
			}
		}
	}
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b[logged:]), "\n") {
		if strings.Contains(line, syscall.ENOSPC.Error()) && strings.Contains(line, "state.db") {
			return "client log: " + line, nil
		}
	}
	return "", nil
}

// keptRunning checks that each of jobs has one alloc, running, whose
// process is the one in pids.
func keptRunning(s *agent, jobs []string, pids map[string]int) error {
	for _, job := range jobs {
		allocs, err := s.jobAllocs(job)
		if err != nil {
			return err
		}
		if len(allocs) != 1 || allocs[0].ClientStatus != "running" {
			return fmt.Errorf("%s's allocs %+v, want one running", job, allocs)
		}
		if pid, ok := pids[allocs[0].ID]; !ok || !alive(pid) {
			return fmt.Errorf("%s's alloc %s: its process %d is gone", job, allocs[0].ID, pid)
		}
	}
	return nil
}

// mountTmpfs mounts a tmpfs of size at dir (made), or ends the test as
// unavailable. The agent's cleanup unmounts it (unmountUnder).
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		testutil.Unavailable(t, "mounting a tmpfs at %s: %v", dir, err)
	}
}

// fullDiskAttachment is what the test reads of an attachment.
type fullDiskAttachment struct {
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	LastError struct {
		Message string `json:"message"`
	} `json:"last_error"`
}

// attachmentOf returns volume's one attachment.
func attachmentOf(s *agent, volume string) (fullDiskAttachment, error) {
	var v struct {
		Attachments []fullDiskAttachment `json:"attachments"`
	}
	if err := s.getJSON("/v1/volume/csi/"+volume, &v); err != nil {
		return fullDiskAttachment{}, err
	}
	if len(v.Attachments) != 1 {
		return fullDiskAttachment{}, fmt.Errorf("volume %s has %d attachments, want 1", volume, len(v.Attachments))
	}
	return v.Attachments[0], nil
}

// fullDiskJob is a service job of one raw_exec task that writes its PID
// and sleeps, with no restarts and no rescheduling; with vol, its group
// claims that volume.
func fullDiskJob(id, vol string) string {
	volume := ""
	if vol != "" {
		volume = fmt.Sprintf(`
    volume "data" {
      type            = "csi"
      source          = %q
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }`, vol)
	}
	return fmt.Sprintf(`
job %q {
  type = "service"
  group "g" {
    count = 1%s
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > local/pid; exec sleep 3600"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
      kill_timeout = "2s"
    }
  }
}
`, id, volume)
}

// runningPID waits until job's one alloc runs on c and returns its task's
// PID.
func runningPID(t *testing.T, s, c *agent, job string) int {
	t.Helper()
	var pid int
	eventually(t, 60*time.Second, job+" running", func() error {
		allocs, err := s.jobAllocs(job)
		if err != nil {
			return err
		}
		if len(allocs) != 1 || allocs[0].ClientStatus != "running" {
			return fmt.Errorf("%s's allocs %+v, want one running", job, allocs)
		}
		if pid, err = taskPID(c, allocs[0].ID, "t"); err != nil {
			return err
		}
		if !alive(pid) {
			return fmt.Errorf("%s's process %d is not alive", job, pid)
		}
		return nil
	})
	return pid
}

// onlyAlloc returns the ID of job's one alloc.
func onlyAlloc(t *testing.T, s *agent, job string) string {
	t.Helper()
	allocs, err := s.jobAllocs(job)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("%s's allocs: %+v, %v; want one", job, allocs, err)
	}
	return allocs[0].ID
}

// waitClaim waits until volume's one claim is in state.
func waitClaim(t *testing.T, s *agent, volume, state string) {
	t.Helper()
	eventually(t, 60*time.Second, volume+"'s claim "+state, func() error {
		v, err := s.volume(volume)
		if err != nil {
			return err
		}
		if len(v.Claims) != 1 || v.Claims[0].State != state {
			return fmt.Errorf("claims %+v, want one %s", v.Claims, state)
		}
		return nil
	})
}

// fillDisk writes path until the filesystem has no byte left.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// processesAgree checks that every alloc of jobs the servers show running
// on c has its task's process alive, and every live process of a task
// under c's data dir belongs to an alloc the servers show running.
func processesAgree(s, c *agent, jobs []string) error {
	running := map[string]bool{}
	for _, job := range jobs {
		allocs, err := s.jobAllocs(job)
		if err != nil {
			return err
		}
		for _, a := range allocs {
			if a.ClientStatus != "running" {
				continue
			}
			running[a.ID] = true
			pid, err := taskPID(c, a.ID, "t")
			if err != nil || !alive(pid) {
				return fmt.Errorf("alloc %s of %s is running on the servers, its process is not (pid %d, %v)", a.ID, job, pid, err)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(c.dir, "data", "alloc", "*", "t", "local", "pid"))
	for _, f := range files {
		alloc := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(f))))
		pid, err := taskPID(c, alloc, "t")
		if err != nil || !alive(pid) {
			continue
		}
		if !running[alloc] {
			return fmt.Errorf("process %d of alloc %s runs, the servers do not show the alloc running", pid, alloc)
		}
	}
	return nil
}
