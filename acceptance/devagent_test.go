package acceptance

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sdk/executor"
)

// startDevAgent starts `berth run -dev` (one process, server and client,
// raw_exec enabled) with its name and ports from a config file, and waits
// until its node is ready. Its data directory is short and independent of
// the test's name: a CSI plugin's socket, <data_dir>/csi/plugins/<alloc>-
// <task>/csi.sock, must fit the 107 bytes of a unix socket address, which
// leaves a data_dir of about 40. Whatever its tasks left mounted under it
// (a failed run that did not stop its volume users) is unmounted after the
// agent stopped, before the directory is removed.
func startDevAgent(t *testing.T) *agent {
	t.Helper()
	a := newAgent(t, "dev", freePorts(t), "")
	dir, err := os.MkdirTemp("", "berth-acc-dev-")
	if err != nil {
		t.Fatal(err)
	}
	a.dir = dir
	a.flags = []string{"-dev", "-data-dir", filepath.Join(dir, "data")}
	// Cleanups run last-registered first: the agent stops (registered by
	// start), then its leftover tasks are killed, then their mounts go,
	// then the directory.
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing the dev agent's directory: %v", err)
		}
	})
	t.Cleanup(func() { unmountUnder(t, a.dir) })
	t.Cleanup(func() { killLeftoverTasks(a) })
	a.start()
	eventually(t, 60*time.Second, "dev agent's node ready", func() error {
		ns, err := a.nodes()
		if err != nil {
			return err
		}
		if len(ns) != 1 || ns[0].Status != "ready" {
			return fmt.Errorf("nodes %+v, want one ready", ns)
		}
		return nil
	})
	return a
}

// mountsUnder lists the mount points of this mount namespace at or under
// dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	points, err := executor.MountPoints()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range points {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out, nil
}

// unmountUnder detaches every mount left under dir, so that neither the
// machine's mount table nor the removal of the test's directories keeps
// them. A test that passed tears its volumes down itself and asserts so;
// this only cleans up after a failed one, and says what it found.
func unmountUnder(t *testing.T, dir string) {
	mounts, err := mountsUnder(dir)
	if err != nil {
		t.Logf("listing mounts under %s: %v", dir, err)
		return
	}
	for _, m := range mounts {
		t.Logf("unmounting leftover mount %s", m)
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Logf("unmounting %s: %v", m, err)
		}
	}
}

// noMountsUnder fails unless nothing is mounted under dir: every volume
// staged or published there was torn down.
func noMountsUnder(t *testing.T, what, dir string) {
	t.Helper()
	eventually(t, 10*time.Second, "nothing mounted under "+what, func() error {
		mounts, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mounts) > 0 {
			return fmt.Errorf("still mounted: %v", mounts)
		}
		return nil
	})
}

// createVolume runs `berth volume create` for a single-node-writer,
// file-system volume id of plugin, and waits until the agent asked lists
// it schedulable (a follower may apply the write a moment after the
// leader answered).
func createVolume(t *testing.T, s *agent, id, plugin string) (externalID string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), id+".hcl")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`
id           = %q
plugin_id    = %q
capacity_min = "1MiB"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`, id, plugin)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := s.cli("volume", "create", file); err != nil {
		t.Fatalf("volume create %s: %v\n%s", id, err, out)
	}
	eventually(t, 10*time.Second, id+" registered and schedulable", func() error {
		v, err := s.volume(id)
		if err != nil {
			return err
		}
		if v.Volume.ExternalID == "" || !v.Volume.Schedulable {
			return fmt.Errorf("volume %s: external ID %q, schedulable %v", id, v.Volume.ExternalID, v.Volume.Schedulable)
		}
		externalID = v.Volume.ExternalID
		return nil
	})
	return externalID
}

// waitPluginSchedulable waits until plugin has ctrls healthy of ctrls
// expected controllers and nodes of nodes node instances, and is
// schedulable.
func waitPluginSchedulable(t *testing.T, s *agent, plugin string, ctrls, nodes int) {
	t.Helper()
	eventually(t, 60*time.Second, fmt.Sprintf("plugin %s schedulable with %d/%d controllers and %d/%d nodes", plugin, ctrls, ctrls, nodes, nodes), func() error {
		p, err := s.plugin(plugin)
		if err != nil {
			return err
		}
		if err := wantCounts(p, ctrls, ctrls, nodes, nodes); err != nil {
			return err
		}
		if !p.Schedulable {
			return fmt.Errorf("plugin %s not schedulable: %+v", plugin, p)
		}
		return nil
	})
}
