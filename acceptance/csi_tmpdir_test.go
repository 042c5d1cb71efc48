package acceptance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// The example third-party storage adapter, end to end: examples/csi-tmpdir
// (its own module, importing only berth's sdk) is built as `make plugins`
// builds it, into <plugin_dir>/csi/tmpdir of an agent (server and client)
// whose config sets plugin_dir and configures the adapter with a plugin
// block. The agent loads it: CSI plugin "tmpdir", a node-only plugin with
// the example's provider name, schedulable. A volume of it is registered
// (it has no controller, so volumes are not created), a job mounts it and
// writes a file, which lands in the adapter's own directory; the job's
// stop frees the claim and unmounts it; a second job mounts it again and
// reads the file.
func TestThirdPartyStorageAdapterFromPluginDir(t *testing.T) {
	testutil.RequireRoot(t, "the tmpdir adapter bind-mounts each volume at its publish target")
	pluginDir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "csi", "tmpdir"), ".")
	build.Dir = filepath.Join("..", "examples", "csi-tmpdir")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/csi-tmpdir: %v\n%s", err, out)
	}

	a := newAgent(t, "tp1", freePorts(t), fmt.Sprintf(`
plugin_dir = %q
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
plugin "tmpdir" {
  type = "csi"
  config {
    max_volumes = 4
  }
}`, pluginDir))
	// After the agent stops (cleanups run last-registered first): its
	// tasks are ended, then the adapter if it outlived the agent, then
	// whatever a failed run left mounted under its directory is unmounted.
	t.Cleanup(func() { unmountUnder(t, a.dir) })
	t.Cleanup(func() { killByExe(t, filepath.Join(pluginDir, "csi", "tmpdir")) })
	t.Cleanup(func() { killLeftoverTasks(a) })
	a.start()
	t.Cleanup(func() { stopAllJobs(t, a, "tmp-read", "tmp-write") })

	waitPluginSchedulable(t, a, "tmpdir", 0, 1)
	p, err := a.plugin("tmpdir")
	if err != nil {
		t.Fatal(err)
	}
	if p.Provider != "tmpdir.csi.example.berth.dev" || p.Version != "0.1.0" || p.ControllerRequired {
		t.Fatalf("plugin tmpdir: provider %q version %q controller required %v; want the example's, 0.1.0, no controller", p.Provider, p.Version, p.ControllerRequired)
	}
	nodeID := p.nodeID()

	volFile := filepath.Join(t.TempDir(), "scratch.hcl")
	if err := os.WriteFile(volFile, []byte(`
id          = "scratch"
plugin_id   = "tmpdir"
external_id = "scratch-1"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := a.cli("volume", "register", volFile); err != nil {
		t.Fatalf("volume register: %v\n%s", err, out)
	}

	runJob(t, a, "tmp-write", volumeUserJob("tmp-write", "scratch", "", "echo kept-by-tmpdir > $BERTH_VOLUME_DATA/hello && echo wrote"))
	w := waitClaimedBy(t, a, "tmp-write", "scratch", nodeID)
	waitOutput(t, a, w.ID, "user", "wrote")
	// The file is in the adapter's own directory, under the volume's
	// external ID.
	stored := filepath.Join(a.dir, "data", "csi", "adapters", "tmpdir", "volumes", "scratch-1", "hello")
	if b, err := os.ReadFile(stored); err != nil || string(b) != "kept-by-tmpdir\n" {
		t.Fatalf("the adapter's copy %s: %q (%v)", stored, b, err)
	}
	published := filepath.Join(a.dir, "data", "csi", "publish", w.ID)
	stopJob(t, a, "tmp-write")
	waitVolumeFreed(t, a, "scratch", time.Now(), freeBound)
	noMountsUnder(t, "the writer's publish directory", published)

	runJob(t, a, "tmp-read", volumeUserJob("tmp-read", "scratch", "", "cat $BERTH_VOLUME_DATA/hello"))
	r := waitClaimedBy(t, a, "tmp-read", "scratch", nodeID)
	waitOutput(t, a, r.ID, "user", "kept-by-tmpdir")
	stopJob(t, a, "tmp-read")
	waitVolumeFreed(t, a, "scratch", time.Now(), freeBound)

	// The node reports the adapter among its CSI plugins.
	out, err := a.cli("node", "status", nodeID)
	if err != nil || !strings.Contains(out, "tmpdir") {
		t.Fatalf("node status does not list the tmpdir plugin: %v\n%s", err, out)
	}
}
