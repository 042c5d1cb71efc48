package execdriver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"berth.dev/berth/sdk/driverpb"
)

// TestMountPropagation: a tmpfs the task mounts under
// its bidirectional mount appears on the host, a tmpfs the host mounts
// under the source appears in the task; neither crosses a private mount,
// and a host-to-task mount carries only the host's.
func TestMountPropagation(t *testing.T) {
	d := client(t)
	host := t.TempDir()
	bidi, priv, h2t := filepath.Join(host, "bidi"), filepath.Join(host, "priv"), filepath.Join(host, "h2t")
	for _, dir := range []string{bidi, priv, h2t, filepath.Join(bidi, "from-host"), filepath.Join(priv, "from-host"), filepath.Join(h2t, "from-host")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := taskCfg(t, "propagation", sh(`
		mkdir -p /bidi/from-task /priv/from-task /h2t/from-task
		mount -t tmpfs task-bidi /bidi/from-task && echo task > /bidi/from-task/marker
		mount -t tmpfs task-priv /priv/from-task && echo task > /priv/from-task/marker
		mount -t tmpfs task-h2t /h2t/from-task && echo task > /h2t/from-task/marker
		touch /ready
		while [ ! -e /bidi/from-host/marker ]; do sleep 0.02; done
		cat /bidi/from-host/marker
		while [ ! -e /h2t/from-host/marker ]; do sleep 0.02; done
		echo "h2t=$(cat /h2t/from-host/marker)"
		[ -e /priv/from-host/marker ] && echo private-leaked
		touch /done
		exec sleep 1000`))
	// Mounting needs CAP_SYS_ADMIN, which the default set leaves out.
	cfg.DriverConfig["cap_add"] = capList("SYS_ADMIN")
	cfg.Mounts = []*driverpb.Mount{
		{HostPath: bidi, TaskPath: "/bidi", Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL},
		{HostPath: priv, TaskPath: "/priv", Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE},
		{HostPath: h2t, TaskPath: "/h2t", Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK},
	}
	start(t, d, cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))
	t.Cleanup(func() {
		unix.Unmount(filepath.Join(bidi, "from-task"), unix.MNT_DETACH)
		unix.Unmount(filepath.Join(bidi, "from-host"), unix.MNT_DETACH)
		unix.Unmount(filepath.Join(priv, "from-host"), unix.MNT_DETACH)
		unix.Unmount(filepath.Join(h2t, "from-host"), unix.MNT_DETACH)
	})

	// Task → host.
	if data, err := os.ReadFile(filepath.Join(bidi, "from-task", "marker")); err != nil || string(data) != "task\n" {
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		t.Errorf("the task's mount under its bidirectional mount is not on the host: %q, %v\nhost mounts:\n%s", data, err, grep(string(mi), host))
	}
	if _, err := os.Stat(filepath.Join(priv, "from-task", "marker")); err == nil {
		t.Errorf("the task's mount under its private mount reached the host")
	}
	if _, err := os.Stat(filepath.Join(h2t, "from-task", "marker")); err == nil {
		t.Errorf("the task's mount under its host-to-task mount reached the host")
	}
	// Host → task.
	for _, dir := range []string{filepath.Join(bidi, "from-host"), filepath.Join(priv, "from-host"), filepath.Join(h2t, "from-host")} {
		if err := unix.Mount("host", dir, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "marker"), []byte("host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "done"))
	out := stdoutOnce(t, cfg, "host\n")
	if !strings.Contains(out, "host\n") {
		t.Errorf("the host's mount under the bidirectional source did not reach the task; its output:\n%s", out)
	}
	if !strings.Contains(out, "h2t=host\n") {
		t.Errorf("the host's mount under the host-to-task source did not reach the task; its output:\n%s", out)
	}
	if strings.Contains(out, "private-leaked") {
		t.Errorf("the host's mount under the private source reached the task")
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestNestedMountsParentFirst: a mount whose task path lies under another
// mount's is mounted after it, so both are seen whatever order the job
// lists them in; the read-only one stays read-only.
func TestNestedMountsParentFirst(t *testing.T) {
	d := client(t)
	outer, inner := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outer, "o"), []byte("outer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inner, "i"), []byte("inner\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := taskCfg(t, "nested", sh(`cat /data/o /data/sub/i; touch /data/sub/x 2>/dev/null && echo inner-writable; true`))
	cfg.Mounts = []*driverpb.Mount{
		{HostPath: inner, TaskPath: "/data/sub", ReadOnly: true},
		{HostPath: outer, TaskPath: "/data"},
	}
	start(t, d, cfg)
	if res := wait(t, d, cfg.GetId()); res.GetExitCode() != 0 {
		t.Fatalf("task: %v\n%s", res, stdout(t, cfg))
	}
	if out := stdout(t, cfg); out != "outer\ninner\n" {
		t.Errorf("nested mounts: task saw %q, want the outer then the inner file (and the inner mount read-only)", out)
	}
}
