package acceptance

import (
	"bufio"
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

// The volume mounts acceptance test: one agent (server and client) as a
// real process, root, with raw_exec, the isolating exec driver and the
// built-in hostpath storage adapter, and one single-node-writer volume
// created through it. Batch jobs use it one after the other (each waits
// for the last one's claim to be freed):
//
//   - an exec task (its own mount namespace, pivot_root into its task
//     dir) gets the publish target bind-mounted at its volume_mount's
//     destination and writes a file there;
//   - an exec task mounting it read_only reads that file, and writing
//     fails with EROFS;
//   - a raw_exec task mounting it read_only beside a raw_exec sibling
//     that mounts it writable (and an exec one mounting it read_only):
//     the sibling writes through $BERTH_VOLUME_DATA (the publish path);
//     the read-only raw_exec task's $BERTH_VOLUME_DATA is its own
//     read-only bind in its task dir, where it reads the sibling's file
//     and writing fails with EROFS, as it does for the exec task through
//     the driver's read-only bind of the writable publish; once the alloc
//     is done no bind is left on the host;
//   - a raw_exec task whose group mounts the volume read-only only: the
//     volume is published read-only, and writing fails with EROFS;
//   - a last exec task finds the first one's file and none of the writes
//     that were refused.
func TestVolumeMountsThroughDrivers(t *testing.T) {
	testutil.RequireRoot(t, "the exec driver isolates tasks with namespaces and the hostpath plugin bind-mounts volumes")
	s := startMountAgent(t)
	t.Cleanup(func() { stopAllJobs(t, s, "ex-write", "ex-read", "raw-mixed", "raw-ro", "ex-check") })

	createMountVolume(t, s)

	// exec, writable: the write lands in the volume.
	write := runMountBatch(t, s, "ex-write", mountTask("w", "exec", false,
		`echo written-by-exec > /data/hello && cat /data/hello`))
	if out := mountTaskLog(t, s, write, "w", false); !strings.Contains(out, "written-by-exec") {
		t.Fatalf("the exec writer's output %q lacks what it wrote", out)
	}

	// exec, read_only: reads, cannot write.
	read := runMountBatch(t, s, "ex-read", mountTask("r", "exec", true,
		`cat /data/hello; if echo x > /data/from-exec-reader; then echo WROTE; else echo write-refused; fi`))
	if out := mountTaskLog(t, s, read, "r", false); !strings.Contains(out, "written-by-exec") || !strings.Contains(out, "write-refused") {
		t.Fatalf("the read-only exec task's output %q: want the writer's file read and the write refused", out)
	}
	if errOut := mountTaskLog(t, s, read, "r", true); !strings.Contains(errOut, "Read-only file system") {
		t.Fatalf("the read-only exec task's write failed with %q, want EROFS", errOut)
	}

	// raw_exec, a read-only task beside a writable sibling.
	mixed := runMountBatch(t, s, "raw-mixed",
		mountTask("w", "raw_exec", false, `echo from-raw-writer > $BERTH_VOLUME_DATA/raw && echo path=$BERTH_VOLUME_DATA`)+
			mountTask("r", "raw_exec", true, `until [ -s $BERTH_VOLUME_DATA/raw ]; do sleep 0.1; done; cat $BERTH_VOLUME_DATA/raw; `+
				`echo path=${volume.data}; if echo x > $BERTH_VOLUME_DATA/from-raw-reader; then echo WROTE; else echo write-refused; fi`)+
			mountTask("e", "exec", true, `until [ -s /data/raw ]; do sleep 0.1; done; cat /data/raw; `+
				`if echo x > /data/from-exec-beside; then echo WROTE; else echo write-refused; fi`))
	// The exec task's read-only mount is the driver's read-only bind of a
	// writable publish. The readers wait for the file to be non-empty: the
	// writer's redirection creates it before it writes, and a reader that
	// only waited for it to exist read it empty (CI at 5bde42d, once the
	// raw_exec writer started on a standby executor).
	if out := mountTaskLog(t, s, mixed, "e", false); !strings.Contains(out, "from-raw-writer") || !strings.Contains(out, "write-refused") {
		t.Fatalf("the read-only exec task beside a writer: output %q, want the writer's file read and the write refused", out)
	}
	if errOut := mountTaskLog(t, s, mixed, "e", true); !strings.Contains(errOut, "Read-only file system") {
		t.Fatalf("the read-only exec task beside a writer: write failed with %q, want EROFS", errOut)
	}
	wOut, rOut := mountTaskLog(t, s, mixed, "w", false), mountTaskLog(t, s, mixed, "r", false)
	publishPath := filepath.Join(s.dir, "data", "csi", "publish", mixed, "mvol")
	roPath := filepath.Join(s.dir, "data", "alloc", mixed, "r", "csi-volumes", "mvol")
	if !strings.Contains(wOut, "path="+publishPath) {
		t.Fatalf("the writable raw_exec task's output %q, want its volume at the publish path %s", wOut, publishPath)
	}
	if !strings.Contains(rOut, "from-raw-writer") || !strings.Contains(rOut, "path="+roPath) || !strings.Contains(rOut, "write-refused") {
		t.Fatalf("the read-only raw_exec task's output %q: want the sibling's file read at %s and the write refused", rOut, roPath)
	}
	if errOut := mountTaskLog(t, s, mixed, "r", true); !strings.Contains(errOut, "Read-only file system") {
		t.Fatalf("the read-only raw_exec task's write failed with %q, want EROFS", errOut)
	}
	eventually(t, 30*time.Second, "no read-only bind left on the host", func() error {
		if n := mountPointsUnder(t, filepath.Join(s.dir, "data", "alloc")); len(n) != 0 {
			return fmt.Errorf("mounts left under the alloc dirs: %v", n)
		}
		return nil
	})

	// raw_exec, every mount read-only: published read-only.
	ro := runMountBatch(t, s, "raw-ro", mountTask("r", "raw_exec", true,
		`cat $BERTH_VOLUME_DATA/hello; echo path=$BERTH_VOLUME_DATA; if echo x > $BERTH_VOLUME_DATA/from-raw-ro; then echo WROTE; else echo write-refused; fi`))
	out := mountTaskLog(t, s, ro, "r", false)
	if !strings.Contains(out, "written-by-exec") || !strings.Contains(out, "write-refused") ||
		!strings.Contains(out, "path="+filepath.Join(s.dir, "data", "csi", "publish", ro, "mvol")) {
		t.Fatalf("the read-only-only raw_exec task's output %q: want the file read at its publish path and the write refused", out)
	}
	if errOut := mountTaskLog(t, s, ro, "r", true); !strings.Contains(errOut, "Read-only file system") {
		t.Fatalf("the read-only-only raw_exec task's write failed with %q, want EROFS", errOut)
	}

	// What the volume holds now: the two writers' files, none of the
	// refused ones.
	check := runMountBatch(t, s, "ex-check", mountTask("c", "exec", false, `ls /data | sort | tr '\n' ' '`))
	if out := strings.TrimSpace(mountTaskLog(t, s, check, "c", false)); out != "hello raw" {
		t.Fatalf("the volume holds %q, want \"hello raw\"", out)
	}
	waitMountVolumeFreed(t, s, "mvol")
	if m := mountPointsUnder(t, filepath.Join(s.dir, "data")); len(m) != 0 {
		t.Fatalf("mounts left under the data dir with the volume unclaimed: %v", m)
	}
}

// startMountAgent starts one agent that is the only server and a client,
// with raw_exec, exec and the built-in hostpath storage adapter, and waits
// until the adapter's plugin is schedulable.
func startMountAgent(t *testing.T) *agent {
	t.Helper()
	a := newAgent(t, "vm1", freePorts(t), `
server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled = true
}
plugin "raw_exec" {
  config { enabled = true }
}
plugin "exec" {
  config { enabled = true }
}
plugin "hostpath" {
  type = "csi"
}`)
	t.Cleanup(func() { killLeftoverTasks(a) })
	a.start()
	eventually(t, 60*time.Second, "the hostpath adapter schedulable", func() error {
		p, err := a.plugin("hostpath")
		if err != nil {
			return err
		}
		if !p.Schedulable || p.NodesHealthy != 1 {
			return fmt.Errorf("plugin hostpath: schedulable %v, %d healthy nodes", p.Schedulable, p.NodesHealthy)
		}
		return nil
	})
	return a
}

// createMountVolume creates volume mvol (single-node-writer, 1 MiB)
// through the hostpath adapter.
func createMountVolume(t *testing.T, s *agent) {
	t.Helper()
	volFile := filepath.Join(t.TempDir(), "vol.hcl")
	if err := os.WriteFile(volFile, []byte(`
id           = "mvol"
plugin_id    = "hostpath"
capacity_min = "1MiB"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "volume mvol created", func() error {
		if out, err := s.cli("volume", "create", volFile); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

// mountTask is a task of driver that mounts the group's volume "data" at
// /data (read-only when ro) and runs script under sh.
func mountTask(name, driver string, ro bool, script string) string {
	return fmt.Sprintf(`
    task %q {
      driver = %q
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
        read_only   = %t
      }
      resources {
        cpu    = 20
        memory = 32
      }
    }`, name, driver, script, ro)
}

// runMountBatch runs a batch job of one group that claims volume mvol and
// holds tasks, waits for its alloc to complete, and returns the alloc ID.
func runMountBatch(t *testing.T, s *agent, id, tasks string) string {
	t.Helper()
	runJob(t, s, id, fmt.Sprintf(`
job %q {
  type = "batch"
  group "g" {
    volume "data" {
      type            = "csi"
      source          = "mvol"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
%s
  }
}
`, id, tasks))
	var alloc string
	eventually(t, 60*time.Second, id+"'s alloc complete", func() error {
		allocs, err := s.jobAllocs(id)
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
			out, _ := s.cli("alloc", "status", allocs[0].ID)
			t.Fatalf("%s's alloc %s: %s\n%s", id, allocs[0].ID, allocs[0].ClientStatus, out)
		}
		return fmt.Errorf("alloc %s is %s", allocs[0].ID, allocs[0].ClientStatus)
	})
	return alloc
}

// mountTaskLog is a task's stdout (or stderr).
func mountTaskLog(t *testing.T, s *agent, alloc, task string, stderr bool) string {
	t.Helper()
	args := []string{"alloc", "logs"}
	if stderr {
		args = append(args, "-stderr")
	}
	out, err := s.cli(append(args, alloc, task)...)
	if err != nil {
		t.Fatalf("logs of %s in alloc %s: %v\n%s", task, alloc, err, out)
	}
	return out
}

// mountPointsUnder lists the mount points of this process's mount namespace
// (the agent's: it is not isolated) under dir.
func mountPointsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	return out
}

// A raw_exec task's read-only bind survives a restart of its client: the
// task keeps running and its path stays read-only, with nothing
// mounted twice; the job's stop removes it.
func TestReadOnlyBindSurvivesAClientRestart(t *testing.T) {
	testutil.RequireRoot(t, "the hostpath plugin and the read-only bind mount need root")
	s := startMountAgent(t)
	t.Cleanup(func() { stopAllJobs(t, s, "raw-keep") })
	createMountVolume(t, s)
	runJob(t, s, "raw-keep", fmt.Sprintf(`
job "raw-keep" {
  type = "service"
  group "g" {
    volume "data" {
      type            = "csi"
      source          = "mvol"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
%s
%s
  }
}
`, mountTask("w", "raw_exec", false, `echo $$ > local/pid; echo kept > $BERTH_VOLUME_DATA/kept; exec sleep 3600`),
		mountTask("r", "raw_exec", true, `echo $$ > local/pid; exec sleep 3600`)))
	var alloc string
	eventually(t, 60*time.Second, "raw-keep running", func() error {
		allocs, err := s.jobAllocs("raw-keep")
		if err != nil || len(allocs) != 1 || allocs[0].ClientStatus != "running" {
			return fmt.Errorf("allocs %+v (%v)", allocs, err)
		}
		alloc = allocs[0].ID
		return nil
	})
	roPath := filepath.Join(s.dir, "data", "alloc", alloc, "r", "csi-volumes", "mvol")
	allocDir := filepath.Join(s.dir, "data", "alloc")
	readOnly := func(when string) {
		t.Helper()
		eventually(t, 10*time.Second, "the reader's bind "+when, func() error {
			if m := mountPointsUnder(t, allocDir); len(m) != 1 || m[0] != roPath {
				return fmt.Errorf("mounts under the alloc dirs: %v, want only %s", m, roPath)
			}
			if b, err := os.ReadFile(filepath.Join(roPath, "kept")); err != nil || string(b) != "kept\n" {
				return fmt.Errorf("reading the writer's file through the bind: %q, %v", b, err)
			}
			return nil
		})
		if err := os.WriteFile(filepath.Join(roPath, "probe"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
			t.Fatalf("%s: writing through the reader's bind: %v, want EROFS", when, err)
		}
	}
	readOnly("before the restart")
	// Both tasks started (the alloc is running once one task is): a
	// reader still inside StartTask when the agent stops is abandoned and
	// started afresh, so its PID file would name a process that is gone.
	eventually(t, 30*time.Second, "both tasks running", func() error {
		var a struct {
			TaskStates map[string]struct {
				State string `json:"state"`
			} `json:"task_states"`
		}
		if err := s.getJSON("/v1/allocation/"+alloc, &a); err != nil {
			return err
		}
		for _, task := range []string{"w", "r"} {
			if st := a.TaskStates[task].State; st != "running" {
				return fmt.Errorf("task %s is %q", task, st)
			}
		}
		return nil
	})
	var pid int
	eventually(t, 10*time.Second, "the reader's PID", func() (err error) {
		pid, err = taskPID(s, alloc, "r")
		return err
	})

	s.stop()
	s.start()
	eventually(t, 60*time.Second, "raw-keep running after the restart", func() error {
		allocs, err := s.jobAllocs("raw-keep")
		if err != nil || len(allocs) != 1 || allocs[0].ID != alloc || allocs[0].ClientStatus != "running" {
			return fmt.Errorf("allocs %+v (%v)", allocs, err)
		}
		return nil
	})
	if got, err := taskPID(s, alloc, "r"); err != nil || got != pid || !alive(pid) {
		// The task events say why (a failed recovery, a kill).
		status, _ := s.cli("alloc", "status", alloc)
		t.Fatalf("the reader after the restart: pid %d (%v), alive %v; want %d still running\n%s", got, err, alive(pid), pid, status)
	}
	readOnly("after the restart")

	stopJob(t, s, "raw-keep")
	eventually(t, 30*time.Second, "the reader's bind removed after the stop", func() error {
		if m := mountPointsUnder(t, allocDir); len(m) != 0 {
			return fmt.Errorf("mounts under the alloc dirs: %v", m)
		}
		return nil
	})
	waitMountVolumeFreed(t, s, "mvol")
}

// waitMountVolumeFreed waits until volume has no claim left: its last user's
// teardown (unpublish, unstage, controller unpublish) is done, and the
// agent can stop with nothing of it mounted.
func waitMountVolumeFreed(t *testing.T, s *agent, volume string) {
	t.Helper()
	eventually(t, 30*time.Second, volume+" unclaimed", func() error {
		v, err := s.volume(volume)
		if err != nil {
			return err
		}
		if len(v.Claims) != 0 || len(v.Attachments) != 0 {
			return fmt.Errorf("claims %+v, attachments %+v", v.Claims, v.Attachments)
		}
		return nil
	})
}
