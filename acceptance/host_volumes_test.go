package acceptance

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// The host volumes acceptance test: one agent (server and client) as a
// real process with two host volumes in its config, a writable one and a
// read-only one, both directories of the test:
//
//   - `node status` shows them;
//   - a raw_exec task writes into the writable one through
//     $BERTH_VOLUME_DATA, which is the host path, and the file appears
//     there;
//   - an exec task (its own mount namespace) gets the directory
//     bind-mounted at its volume_mount's destination, writes a file the
//     host sees, and a read-only mount of it refuses writes (EROFS);
//   - an exec task mounting it with propagation_mode = "host-to-task" sees
//     a mount the host makes under it after the task started;
//   - a job asking for a host volume the node lacks is not placed, and
//     `job status` says why.
func TestHostVolumes(t *testing.T) {
	testutil.RequireRoot(t, "the exec driver isolates tasks with namespaces and bind-mounts host volumes")
	rw, ro := t.TempDir(), t.TempDir()
	// Before the directories go: what the propagation check mounted, and
	// the shared bind the exec driver may have left on a failed run.
	t.Cleanup(func() { unmountUnder(t, rw) })
	if err := os.WriteFile(filepath.Join(ro, "ro-file"), []byte("from-the-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newAgent(t, "hv1", freePorts(t), fmt.Sprintf(`
server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled = true
  host_volume "scratch" {
    path = %q
  }
  host_volume "shared" {
    path      = %q
    read_only = true
  }
}
plugin "raw_exec" {
  config { enabled = true }
}
plugin "exec" {
  config { enabled = true }
}`, rw, ro))
	t.Cleanup(func() { killLeftoverTasks(s) })
	s.start()
	t.Cleanup(func() { stopAllJobs(t, s, "hv-raw", "hv-exec", "hv-missing", "hv-prop") })
	var nodeID string
	eventually(t, 60*time.Second, "the node ready with its host volumes", func() error {
		ns, err := s.nodes()
		if err != nil {
			return err
		}
		if len(ns) != 1 || ns[0].Status != "ready" {
			return fmt.Errorf("nodes %+v", ns)
		}
		nodeID = ns[0].ID
		return nil
	})
	out, err := s.cli("node", "status", nodeID)
	if err != nil || !strings.Contains(out, "Host Volumes") || !strings.Contains(out, "scratch  false      "+rw) ||
		!strings.Contains(out, "shared   true       "+ro) {
		t.Fatalf("node status (%v) does not list the host volumes:\n%s", err, out)
	}

	raw := runHostBatch(t, s, "hv-raw", `
    volume "data" {
      type   = "host"
      source = "scratch"
    }`, mountTask("w", "raw_exec", false, `echo from-raw > $BERTH_VOLUME_DATA/raw && echo path=${volume.data}`))
	if got, err := os.ReadFile(filepath.Join(rw, "raw")); err != nil || string(got) != "from-raw\n" {
		t.Fatalf("the raw_exec task's file on the host: %q, %v", got, err)
	}
	if out := mountTaskLog(t, s, raw, "w", false); !strings.Contains(out, "path="+rw) {
		t.Fatalf("the raw_exec task's ${volume.data} is not the host path %s: %q", rw, out)
	}

	ex := runHostBatch(t, s, "hv-exec", `
    volume "data" {
      type   = "host"
      source = "scratch"
    }
    volume "ro" {
      type      = "host"
      source    = "shared"
      read_only = true
    }`, mountTask("w", "exec", false, `echo from-exec > /data/exec && cat /data/raw`)+`
    task "r" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "cat /ro/ro-file; if echo x > /ro/nope; then echo WROTE; else echo write-refused; fi"]
      }
      volume_mount {
        volume           = "ro"
        destination      = "/ro"
        propagation_mode = "host-to-task"
      }
      resources {
        cpu    = 20
        memory = 32
      }
    }`)
	if got, err := os.ReadFile(filepath.Join(rw, "exec")); err != nil || string(got) != "from-exec\n" {
		t.Fatalf("the exec task's file on the host: %q, %v", got, err)
	}
	if out := mountTaskLog(t, s, ex, "w", false); !strings.Contains(out, "from-raw") {
		t.Fatalf("the exec task did not read the raw_exec task's file through its bind mount: %q", out)
	}
	if out := mountTaskLog(t, s, ex, "r", false); !strings.Contains(out, "from-the-host") || !strings.Contains(out, "write-refused") {
		t.Fatalf("the read-only exec task's output %q: want the host's file read and the write refused", out)
	}
	if _, err := os.Stat(filepath.Join(ro, "nope")); err == nil {
		t.Fatal("a write through a read-only host volume reached the host")
	}

	// host-to-task: a mount the host makes under the volume after the
	// task started reaches the task (rslave); with private propagation it
	// would see the empty directory under it and never the marker.
	if err := os.Mkdir(filepath.Join(rw, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	runJob(t, s, "hv-prop", fmt.Sprintf(`
job "hv-prop" {
  type = "batch"
  group "g" {
    volume "data" {
      type   = "host"
      source = "scratch"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "p" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      volume_mount {
        volume           = "data"
        destination      = "/data"
        propagation_mode = "host-to-task"
      }
      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
`, "until [ -e /data/sub/marker ]; do sleep 0.1; done; cat /data/sub/marker"))
	waitJobRunning(t, s, "hv-prop")
	mountTmpfs(t, filepath.Join(rw, "sub"), "1m")
	if err := os.WriteFile(filepath.Join(rw, "sub", "marker"), []byte("propagated\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var prop string
	eventually(t, 30*time.Second, "hv-prop's task saw the host's mount", func() error {
		allocs, err := s.jobAllocs("hv-prop")
		if err != nil || len(allocs) != 1 {
			return fmt.Errorf("allocs %v, %v", allocs, err)
		}
		if allocs[0].ClientStatus != "complete" {
			return fmt.Errorf("alloc %s is %s", allocs[0].ID, allocs[0].ClientStatus)
		}
		prop = allocs[0].ID
		return nil
	})
	if out := mountTaskLog(t, s, prop, "p", false); !strings.Contains(out, "propagated") {
		t.Fatalf("the host-to-task task's output %q lacks the marker", out)
	}
	if err := syscall.Unmount(filepath.Join(rw, "sub"), 0); err != nil {
		t.Fatalf("unmounting the propagation check's tmpfs: %v", err)
	}

	runJob(t, s, "hv-missing", fmt.Sprintf(`
job "hv-missing" {
  type = "batch"
  group "g" {
    volume "data" {
      type   = "host"
      source = "nowhere"
    }
%s
  }
}
`, mountTask("w", "raw_exec", false, "true")))
	eventually(t, 30*time.Second, "hv-missing's placement failure", func() error {
		var evals []struct {
			ID     string         `json:"id"`
			Failed map[string]any `json:"failed_tg_allocs"`
		}
		if err := s.getJSON("/v1/job/hv-missing/evaluations", &evals); err != nil {
			return err
		}
		for _, e := range evals {
			if len(e.Failed) == 0 {
				continue
			}
			out, err := s.cli("eval", "status", e.ID)
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			if !strings.Contains(out, `Constraint "volume \"data\": no host volume \"nowhere\" on the node": 1 node excluded by filter`) {
				return fmt.Errorf("eval status does not say why:\n%s", out)
			}
			return nil
		}
		return fmt.Errorf("no evaluation with placement failures: %+v", evals)
	})
}

// runHostBatch runs a batch job of one group with volumes and tasks,
// waits for its alloc to complete, and returns the alloc ID.
func runHostBatch(t *testing.T, s *agent, id, volumes, tasks string) string {
	t.Helper()
	runJob(t, s, id, fmt.Sprintf(`
job %q {
  type = "batch"
  group "g" {
%s
    restart {
      attempts = 0
      mode     = "fail"
    }
%s
  }
}
`, id, volumes, tasks))
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
