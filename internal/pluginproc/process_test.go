package pluginproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestSocketDirs(t *testing.T) {
	dir, err := NewSocketDir("csi", "hostpath")
	if err != nil {
		t.Fatal(err)
	}
	defer RemoveSocketDir(dir)
	addr := filepath.Join(dir, "plugin123")
	if got := OwnedSocketDir("csi", "hostpath", addr); got != dir {
		t.Errorf("OwnedSocketDir of our own = %q, want %q", got, dir)
	}
	// Another kind's, another plugin's, or an arbitrary directory is not ours.
	for _, c := range []struct{ kind, name, addr string }{
		{"driver", "hostpath", addr},
		{"csi", "tmpdir", addr},
		{"csi", "hostpath", "/var/lib/something/plugin1"},
		{"csi", "hostpath", filepath.Join(os.TempDir(), "plugin1")},
	} {
		if got := OwnedSocketDir(c.kind, c.name, c.addr); got != "" {
			t.Errorf("OwnedSocketDir(%q, %q, %q) = %q, want none", c.kind, c.name, c.addr, got)
		}
	}
	RemoveSocketDir(dir)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("socket dir after removal: %v", err)
	}
	RemoveSocketDir("") // nothing to do, no panic
}

func TestFailedByItself(t *testing.T) {
	run := func(script string) *os.ProcessState {
		cmd := exec.Command("/bin/sh", "-c", script)
		_ = cmd.Run()
		return cmd.ProcessState
	}
	if how, ok := FailedByItself(run("exit 3")); !ok || how != "exited with status 3" {
		t.Errorf("exit 3: %q, %v", how, ok)
	}
	if how, ok := FailedByItself(run("kill -SEGV $$")); !ok || how != "was killed by segmentation fault" {
		t.Errorf("SIGSEGV: %q, %v", how, ok)
	}
	// Success, a SIGKILL (the launcher giving up) and no process at all
	// are not failures of the plugin's own.
	for name, st := range map[string]*os.ProcessState{"exit 0": run("exit 0"), "SIGKILL": run("kill -KILL $$"), "none": nil} {
		if how, ok := FailedByItself(st); ok {
			t.Errorf("%s: %q", name, how)
		}
	}
}
