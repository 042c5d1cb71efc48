package acceptance

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The dynamic host volumes acceptance test: one agent (server and client)
// as a real process.
//
//   - `volume create` of a type = "host" file (built-in mkdir plugin,
//     single-node-single-writer) makes <host_volumes_dir>/<id> on the node
//     with the asked mode, and `volume status` lists it;
//   - a job writing through it runs on the node; a second job asking for
//     it is not placed (the claim is held: single writer) until the first
//     stops, then runs and reads the first one's file;
//   - `volume delete` is refused while the second job's alloc claims it;
//   - after an agent restart the node still offers it (the client made it
//     again from its record: its directory, removed while the agent was
//     down, is back);
//   - once the job stopped, `volume delete` removes the directory and the
//     record;
//   - an external plugin of host_volume_plugin_dir gets the contract's
//     environment (DHV_PARAMETERS), its answer (path, bytes) is recorded,
//     and delete runs it.
func TestDynamicHostVolumes(t *testing.T) {
	volDir, pluginDir := t.TempDir(), t.TempDir()
	// An external plugin with the contract: it makes the directory and
	// answers its path and a size.
	if err := os.WriteFile(filepath.Join(pluginDir, "ext"), []byte(`#!/bin/sh
case "$1" in
fingerprint) echo '{"version": "0.1.0"}' ;;
create) mkdir -p "$DHV_HOST_PATH" && echo "$DHV_PARAMETERS" > "$DHV_HOST_PATH/params" &&
  echo "{\"path\": \"$DHV_HOST_PATH\", \"bytes\": $DHV_CAPACITY_MIN_BYTES}" ;;
delete) rm -rf "$DHV_CREATED_PATH" ;;
esac
`), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newAgent(t, "dhv1", freePorts(t), fmt.Sprintf(`
server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled                = true
  host_volumes_dir       = %q
  host_volume_plugin_dir = %q
}
plugin "raw_exec" {
  config { enabled = true }
}`, volDir, pluginDir))
	t.Cleanup(func() { killLeftoverTasks(s) })
	s.start()
	t.Cleanup(func() { stopAllJobs(t, s, "dhv-a", "dhv-b") })
	eventually(t, 60*time.Second, "the node ready", func() error {
		ns, err := s.nodes()
		if err != nil {
			return err
		}
		if len(ns) != 1 || ns[0].Status != "ready" {
			return fmt.Errorf("nodes %+v", ns)
		}
		return nil
	})

	spec := filepath.Join(t.TempDir(), "vol.hcl")
	if err := os.WriteFile(spec, []byte(`
type = "host"
name = "shared"
capability {
  access_mode     = "single-node-single-writer"
  attachment_mode = "file-system"
}
parameters {
  mode = "0750"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := s.cli("volume", "create", spec)
	if err != nil {
		t.Fatalf("volume create: %v\n%s", err, out)
	}
	var id string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "ID" && f[1] == "=" {
			id = f[2]
		}
	}
	path := filepath.Join(volDir, id)
	if st, err := os.Stat(path); id == "" || err != nil || !st.IsDir() || st.Mode().Perm() != 0o750 {
		t.Fatalf("volume create answered\n%s\nand made %s: %v, %v", out, path, st, err)
	}
	if out, err := s.cli("volume", "status"); err != nil || !strings.Contains(out, "shared") || !strings.Contains(out, "host") {
		t.Fatalf("volume status (%v) does not list it:\n%s", err, out)
	}

	runJob(t, s, "dhv-a", hostVolumeServiceJob("dhv-a", `echo from-a > $BERTH_VOLUME_DATA/a && exec sleep 300`))
	waitJobRunning(t, s, "dhv-a")
	eventually(t, 30*time.Second, "dhv-a's file in the volume", func() error {
		b, err := os.ReadFile(filepath.Join(path, "a"))
		if err != nil || string(b) != "from-a\n" {
			return fmt.Errorf("%q, %v", b, err)
		}
		return nil
	})

	runJob(t, s, "dhv-b", hostVolumeServiceJob("dhv-b", `cat $BERTH_VOLUME_DATA/a && exec sleep 300`))
	eventually(t, 30*time.Second, "dhv-b blocked on the claim", func() error {
		out, err := s.cli("job", "status", "dhv-b")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if !strings.Contains(out, "blocked") {
			return fmt.Errorf("job status:\n%s", out)
		}
		allocs, err := s.jobAllocs("dhv-b")
		if err != nil || len(allocs) != 0 {
			return fmt.Errorf("dhv-b allocs %v, %v", allocs, err)
		}
		return nil
	})
	stopJob(t, s, "dhv-a")
	waitJobRunning(t, s, "dhv-b")

	if out, err := s.cli("volume", "delete", id); err == nil || !strings.Contains(out, "volume is in use") {
		t.Fatalf("volume delete of a claimed volume: %v\n%s", err, out)
	}

	node := nodeIDOf(t, s)
	s.stop()
	if err := os.Remove(filepath.Join(path, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s.start()
	eventually(t, 60*time.Second, "the node offering the volume after a restart", func() error {
		out, err := s.cli("node", "status", node)
		if err != nil || !strings.Contains(out, "shared") || !strings.Contains(out, path) {
			return fmt.Errorf("%v:\n%s", err, out)
		}
		return nil
	})

	// The client made it again from its record (a reboot may lose what a
	// plugin made; mkdir's directory here).
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		t.Fatalf("the volume's directory was not made again at restart: %v", err)
	}
	stopJob(t, s, "dhv-b")
	eventually(t, 60*time.Second, "volume deleted", func() error {
		out, err := s.cli("volume", "delete", id)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the volume's directory is left: %v", err)
	}
	if out, err := s.cli("volume", "status", "-type", "host"); err != nil || !strings.Contains(out, "No dynamic host volumes") {
		t.Fatalf("volume status after delete (%v):\n%s", err, out)
	}

	// The external plugin: its answer is recorded, its delete is run.
	extSpec := filepath.Join(t.TempDir(), "ext.hcl")
	if err := os.WriteFile(extSpec, []byte("type = \"host\"\nname = \"ext-vol\"\nplugin_id = \"ext\"\ncapacity_min = \"1MiB\"\nparameters {\n  fs = \"ext4\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = s.cli("volume", "create", extSpec)
	if err != nil || !strings.Contains(out, "Plugin ID     = ext") || !strings.Contains(out, "Capacity      = 1.0 MiB") {
		t.Fatalf("volume create with the external plugin (%v):\n%s", err, out)
	}
	var extID string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "ID" && f[1] == "=" {
			extID = f[2]
		}
	}
	if b, err := os.ReadFile(filepath.Join(volDir, extID, "params")); err != nil || strings.TrimSpace(string(b)) != `{"fs":"ext4"}` {
		t.Fatalf("the plugin's DHV_PARAMETERS: %q, %v", b, err)
	}
	if out, err := s.cli("volume", "delete", extID); err != nil {
		t.Fatalf("volume delete %s: %v\n%s", extID, err, out)
	}
	if _, err := os.Stat(filepath.Join(volDir, extID)); !os.IsNotExist(err) {
		t.Fatalf("the external plugin's delete left the volume: %v", err)
	}
}

func nodeIDOf(t *testing.T, s *agent) string {
	t.Helper()
	ns, err := s.nodes()
	if err != nil || len(ns) != 1 {
		t.Fatalf("nodes %v, %v", ns, err)
	}
	return ns[0].ID
}

// hostVolumeServiceJob is a service job of one raw_exec task mounting the
// dynamic host volume "shared" as group volume "data".
func hostVolumeServiceJob(id, script string) string {
	return fmt.Sprintf(`
job %q {
  group "g" {
    volume "data" {
      type        = "host"
      source      = "shared"
      access_mode = "single-node-single-writer"
    }
    task "t" {
      driver = "raw_exec"
      config {
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
    }
  }
}
`, id, script)
}

func waitJobRunning(t *testing.T, s *agent, job string) {
	t.Helper()
	eventually(t, 60*time.Second, job+" running", func() error {
		allocs, err := s.jobAllocs(job)
		if err != nil {
			return err
		}
		for _, a := range allocs {
			if a.ClientStatus == "running" && a.DesiredStatus == "run" {
				return nil
			}
		}
		return fmt.Errorf("allocs %+v", allocs)
	})
}
