package ociarchive

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/containerdtest"
	"berth.dev/berth/internal/testutil"
)

// TestImportedAndRunByContainerd: containerd imports an archive of a
// dynamically linked shell with its libraries (ctr images import, as the
// containerd driver's load imports one), stores it under the image's name,
// and runs a container of it.
func TestImportedAndRunByContainerd(t *testing.T) {
	if _, err := exec.LookPath("ctr"); err != nil {
		testutil.Unavailable(t, "no ctr binary in PATH (Debian's containerd package ships it)")
	}
	addr := containerdtest.Address(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	if sh, err = filepath.EvalSymlinks(sh); err != nil {
		t.Fatal(err)
	}
	files, err := Executable(sh, "/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	const name = "berth.test/ociarchive-sh:1"
	archive := filepath.Join(t.TempDir(), "sh.tar")
	if err := WriteFile(archive, Image{Name: name, Files: files, Cmd: []string{"/bin/sh", "-c", "echo default-cmd"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := containerdtest.Namespace
	ctr := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", addr, "--namespace", ns}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		_ = exec.Command("ctr", "--address", addr, "--namespace", ns, "images", "remove", name).Run()
	})
	ctr("images", "import", archive)
	if out := ctr("images", "list", "--quiet"); !strings.Contains(out, name) {
		t.Fatalf("after the import containerd lists images %q, want %s", out, name)
	}
	id := "ociarchive-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	if out := ctr("run", "--rm", name, id); strings.TrimSpace(out) != "default-cmd" {
		t.Fatalf("the image's default command printed %q", out)
	}
	if out := ctr("run", "--rm", name, id, "/bin/sh", "-c", "echo ran-in-$((6*7))"); strings.TrimSpace(out) != "ran-in-42" {
		t.Fatalf("the container printed %q, want ran-in-42", out)
	}
}
