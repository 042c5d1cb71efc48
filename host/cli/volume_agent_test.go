package cli

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// TestVolumeCommandsAgainstAnAgent runs the volume commands against a dev
// agent and its built-in hostpath plugin: the whole path from the CLI
// through the HTTP API, the servers and the node's tunnel to the plugin's
// controller and back. A secret given in the file reaches the plugin and
// shows nowhere.
func TestVolumeCommandsAgainstAnAgent(t *testing.T) {
	a := startAgent(t)
	t.Setenv("BERTH_ADDR", "http://"+a.HTTPAddr())
	testutil.WaitFor(t, 20*time.Second, func() error {
		code, out, errOut := berth(t, "plugin", "status", "hostpath")
		if code != 0 || !strings.Contains(out, "Schedulable           = true") {
			return fmt.Errorf("hostpath plugin not schedulable yet: %s%s", out, errOut)
		}
		return nil
	})
	file := writeVolumeFile(t, "db.hcl", `
id           = "db"
plugin_id    = "hostpath"
capacity_min = "1MiB"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
secrets { token = "hunter2" }
`)
	check := func(args ...string) string {
		t.Helper()
		code, out, errOut := berth(t, args...)
		if code != 0 {
			t.Fatalf("berth %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		if strings.Contains(out+errOut, "hunter2") {
			t.Fatalf("berth %s printed a secret:\n%s%s", strings.Join(args, " "), out, errOut)
		}
		return out
	}
	out := check("volume", "create", file)
	if !strings.Contains(out, "with ID db") {
		t.Fatalf("volume create:\n%s", out)
	}
	ext := strings.Fields(out)[3]

	// The same file again creates nothing and says so; with other
	// capabilities it is an error naming the volume and what differs, and
	// nothing changes.
	want := func(out string, parts ...string) {
		t.Helper()
		for _, p := range parts {
			if !strings.Contains(out, p) {
				t.Fatalf("output lacks %q:\n%s", p, out)
			}
		}
	}
	want(check("volume", "create", file), `Volume "db" exists already as asked (external ID `+ext+`): unchanged, nothing created`)
	refused := func(src string, parts ...string) {
		t.Helper()
		args := []string{"volume", "create", writeVolumeFile(t, "other.hcl", src)}
		code, out, errOut := berth(t, args...)
		if code != 1 || strings.Contains(out, "Created") {
			t.Fatalf("berth %s: exit %d, want 1\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		want(errOut, parts...)
	}
	refused(strings.Replace(string(mustRead(t, file)), `"single-node-writer"`, `"multi-node-multi-writer"`, 1), `volume "db"`,
		"a different volume is registered under the ID", "capabilities: registered [single-node-writer/file-system], asked [multi-node-multi-writer/file-system]")
	// Another ID by the same name: the plugin (CreateVolume is idempotent
	// by name) answers with db's volume, which is not registered twice.
	refused(strings.Replace(string(mustRead(t, file)), `id           = "db"`, "id = \"db2\"\nname = \"db\"", 1),
		`volume "db2"`, `volume "db"`, ext, "registered under another volume ID")
	want(check("volume", "status", "-verbose", "db"), "single-node-writer  file-system\n")

	out = check("volume", "status")
	if !strings.Contains(out, "db  db    hostpath   true") {
		t.Fatalf("volume status:\n%s", out)
	}
	want(check("volume", "status", "-verbose", "db"), "External ID          = "+ext+"\n", "Provider             = hostpath.csi.berth.dev\n",
		"Capacity             = 1.0 MiB\n", "Controller Required  = true\n", "single-node-writer  file-system\n", "No claims\n")
	want(check("volume", "status", "-json", "db"), `"token": "[REDACTED]"`, `"claims": []`, `"attachments": []`)

	out = check("volume", "snapshot", "create", "db", "first")
	want(out, " db         "+ext+"  1.0 MiB")
	snap := strings.Fields(strings.Split(out, "\n")[1])[0]
	want(check("volume", "snapshot", "list", "-plugin", "hostpath", "-volume", "db"), snap+"  db")
	want(check("volume", "snapshot", "list", "-volume", "db"), snap+"  db")

	// Claimed nowhere: hostpath asks for a node expansion, left pending
	// for the next node that stages the volume.
	want(check("volume", "expand", "-capacity-min", "2MiB", "db"), `Volume "db" expanded to 2.0 MiB`, "Node expansion to 2.0 MiB pending")
	want(check("volume", "status", "db"), "Capacity             = 1.0 MiB (node expansion to 2.0 MiB pending)\n")

	want(check("volume", "snapshot", "delete", "hostpath", snap), "Deleted snapshot")
	want(check("volume", "snapshot", "list", "-plugin", "hostpath"), `No snapshots of plugin "hostpath"`)

	// Deregistered, the provider keeps it: registering it again by its
	// external ID has the plugin validate the capabilities.
	want(check("volume", "deregister", "db"), `Volume "db" deregistered`)
	want(check("volume", "status"), "No volumes")
	again := writeVolumeFile(t, "again.hcl", `
id          = "db"
plugin_id   = "hostpath"
external_id = "`+ext+`"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`)
	want(check("volume", "register", again), `Volume "db" registered`)
	code, out, errOut := berth(t, "volume", "register", writeVolumeFile(t, "twin.hcl", strings.Replace(string(mustRead(t, again)), `"db"`, `"twin"`, 1)))
	if code != 1 || !strings.Contains(errOut, `volume "twin"`) || !strings.Contains(errOut, `volume "db"`) || !strings.Contains(errOut, ext) {
		t.Fatalf("register of db's volume as twin: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = berth(t, "volume", "register", writeVolumeFile(t, "gone.hcl", strings.Replace(string(mustRead(t, again)), ext, "vol-nope", 1)))
	if code != 1 || !strings.Contains(errOut, "vol-nope") {
		t.Fatalf("register of a volume the provider lacks: exit %d\n%s%s", code, out, errOut)
	}

	want(check("volume", "delete", "db"), `Successfully deleted volume "db"`)
	want(check("volume", "status"), "No volumes")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
