package execdriver_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// TestTaskIsIsolated: the task is in a PID namespace of its own (it sees
// its init and its own processes, nothing of the host's), has its own
// hostname, cannot see what the host keeps in /root, cannot write the
// chroot env, and none of the mounts that build its root show on the host.
func TestTaskIsIsolated(t *testing.T) {
	d := client(t)
	secret := filepath.Join("/root", fmt.Sprintf("berth-exec-test-%d", os.Getpid()))
	if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	cfg := taskCfg(t, "isolated", sh(fmt.Sprintf(`
		echo "procs=$(ls -d /proc/[0-9]* | wc -l)"
		echo "init=$(tr '\0' ' ' < /proc/1/cmdline | cut -c1-200)"
		echo "hostname=$(hostname)"
		if [ -e %s ]; then echo root-visible; fi
		if touch /usr/berth-exec-test 2>/dev/null; then echo usr-writable; fi
		if touch /etc/berth-exec-test 2>/dev/null; then echo etc-writable; fi
		echo tmp > /tmp/x && echo "tmp=$(cat /tmp/x)"
		echo "dev=$(ls /dev | tr '\n' ' ')"
		echo "hidden=$( (ls -A /logs; ls -A /.exec) | wc -l)"
		touch /ready; exec sleep 1000`, secret)))
	cfg.Name = "web.frontend"
	start(t, d, cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))
	out := stdoutOnce(t, cfg, "hidden=")

	procs, _ := strconv.Atoi(lineValue(out, "procs"))
	if procs < 2 || procs > 30 {
		t.Errorf("the task sees %d processes; want its init and its own few, not the host's", procs)
	}
	if init := lineValue(out, "init"); !strings.Contains(init, "exec.test") {
		t.Errorf("PID 1 in the task is %q, want the namespace init (this test binary)", init)
	}
	if h := lineValue(out, "hostname"); h != "web-frontend" {
		t.Errorf("hostname = %q, want web-frontend (the task's name)", h)
	}
	for _, leak := range []string{"root-visible", "usr-writable", "etc-writable"} {
		if strings.Contains(out, leak) {
			t.Errorf("isolation broken: %s\n%s", leak, out)
		}
	}
	if lineValue(out, "tmp") != "tmp" {
		t.Errorf("/tmp is not writable:\n%s", out)
	}
	for _, dev := range []string{"null", "zero", "urandom", "pts", "shm"} {
		if !strings.Contains(" "+lineValue(out, "dev")+" ", " "+dev+" ") {
			t.Errorf("/dev lacks %s: %s", dev, lineValue(out, "dev"))
		}
	}
	// The executor's state and the logs it writes as root on the host are
	// out of the task's reach.
	if h := lineValue(out, "hidden"); h != "0" {
		t.Errorf("the task sees %s entries in its log and state dirs, want them masked", h)
	}
	if _, err := os.Stat("/usr/berth-exec-test"); err == nil {
		os.Remove("/usr/berth-exec-test")
		t.Error("the task wrote the host's /usr")
	}
	if leaked := mountsUnder(t, cfg.GetTaskDir()); len(leaked) > 0 {
		t.Errorf("the task's root mounts show on the host: %v", leaked)
	}
}

// lineValue returns the value of the first "key=value" line of out.
func lineValue(out, key string) string {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// mountsUnder lists the host's mount points at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// capEff is the task's effective capability set, from its
// /proc/self/status.
const capEff = `grep CapEff /proc/self/status | cut -f2`

// TestCapabilities: a root task gets the default set (no SYS_ADMIN), plus
// cap_add, minus cap_drop; cap_drop = all leaves none.
func TestCapabilities(t *testing.T) {
	d := client(t)
	bit := func(c int) uint64 { return 1 << c }
	defaults := uint64(0)
	for _, c := range []int{unix.CAP_AUDIT_WRITE, unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_FSETID,
		unix.CAP_KILL, unix.CAP_MKNOD, unix.CAP_NET_BIND_SERVICE, unix.CAP_NET_RAW, unix.CAP_SETFCAP, unix.CAP_SETGID,
		unix.CAP_SETPCAP, unix.CAP_SETUID, unix.CAP_SYS_CHROOT} {
		defaults |= bit(c)
	}
	for _, tc := range []struct {
		name      string
		add, drop []string
		want      uint64
	}{
		{"default", nil, nil, defaults},
		{"add and drop", []string{"net_admin"}, []string{"CAP_CHOWN"}, (defaults | bit(unix.CAP_NET_ADMIN)) &^ bit(unix.CAP_CHOWN)},
		{"drop all", nil, []string{"all"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := sh(capEff)
			if tc.add != nil {
				conf["cap_add"] = sdk.ListValue(tc.add...)
			}
			if tc.drop != nil {
				conf["cap_drop"] = sdk.ListValue(tc.drop...)
			}
			cfg := taskCfg(t, "caps-"+strings.ReplaceAll(tc.name, " ", "-"), conf)
			start(t, d, cfg)
			if res := wait(t, d, cfg.GetId()); res.GetExitCode() != 0 {
				t.Fatalf("task failed: %v", res)
			}
			got, err := strconv.ParseUint(strings.TrimSpace(stdout(t, cfg)), 16, 64)
			if err != nil {
				t.Fatalf("CapEff %q: %v", stdout(t, cfg), err)
			}
			if got != tc.want {
				t.Errorf("CapEff = %#x, want %#x", got, tc.want)
			}
			if got&bit(unix.CAP_SYS_ADMIN) != 0 {
				t.Errorf("the task holds CAP_SYS_ADMIN")
			}
		})
	}
}

// TestUserNobody: a task with user nobody runs as nobody, with no
// capabilities and no_new_privs set.
func TestUserNobody(t *testing.T) {
	d := client(t)
	cfg := taskCfg(t, "nobody", sh(`echo "uid=$(id -u)"; echo "caps=$(`+capEff+`)"; echo "nnp=$(grep NoNewPrivs /proc/self/status | cut -f2)"`))
	cfg.User = "nobody"
	start(t, d, cfg)
	if res := wait(t, d, cfg.GetId()); res.GetExitCode() != 0 {
		t.Fatalf("task failed: %v\n%s", res, stdout(t, cfg))
	}
	out := stdout(t, cfg)
	if lineValue(out, "uid") != "65534" {
		t.Errorf("uid = %q, want 65534 (nobody)", lineValue(out, "uid"))
	}
	if lineValue(out, "caps") != "0000000000000000" {
		t.Errorf("nobody's CapEff = %q, want none", lineValue(out, "caps"))
	}
	if lineValue(out, "nnp") != "1" {
		t.Errorf("NoNewPrivs = %q, want 1", lineValue(out, "nnp"))
	}
}

// TestNoNewPrivsCanBeLifted: no_new_privs = false leaves the flag unset.
func TestNoNewPrivsCanBeLifted(t *testing.T) {
	d := client(t)
	conf := sh(`grep NoNewPrivs /proc/self/status | cut -f2`)
	conf["no_new_privs"] = sdk.BoolValue(false)
	cfg := taskCfg(t, "nnp-off", conf)
	start(t, d, cfg)
	wait(t, d, cfg.GetId())
	if got := strings.TrimSpace(stdout(t, cfg)); got != "0" {
		t.Errorf("NoNewPrivs = %q with no_new_privs = false, want 0", got)
	}
}

// TestChrootEnvFromPluginConfig: chroot_env replaces the default set; its
// entries are bound read-only at their task paths, and what it leaves out
// is not in the task's root.
func TestChrootEnvFromPluginConfig(t *testing.T) {
	d := client(t)
	tools := t.TempDir()
	if err := os.WriteFile(filepath.Join(tools, "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{tools: "/opt/tools"}
	for _, p := range []string{"/bin", "/lib", "/lib64", "/usr", "/etc"} {
		env[p] = p
	}
	cfg := sdk.ConfigMap{"enabled": sdk.BoolValue(true), "chroot_env": sdk.MapValue(env)}
	if err := d.SetConfig(ctxT(t), &driverpb.PluginConfig{Values: cfg}); err != nil {
		t.Fatal(err)
	}
	task := taskCfg(t, "chroot-env", sh(`cat /opt/tools/hello; [ -e /sbin ] && echo sbin-present; touch /opt/tools/x 2>/dev/null && echo tools-writable; true`))
	start(t, d, task)
	if res := wait(t, d, task.GetId()); res.GetExitCode() != 0 {
		t.Fatalf("task: %v", res)
	}
	if out := stdout(t, task); out != "hi\n" {
		t.Errorf("task with a custom chroot_env printed %q, want only the tool's output (no /sbin, tools read-only)", out)
	}
}

// TestUserWhoCannotEnterTheRoot: a task whose user may not search its
// task directory fails to start naming the directory, not the program.
func TestUserWhoCannotEnterTheRoot(t *testing.T) {
	d := client(t)
	cfg := taskCfg(t, "locked-out", sh(`true`))
	cfg.User = "nobody"
	if err := os.Chmod(cfg.GetTaskDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := d.StartTask(ctxT(t), cfg)
	var se *sdk.StartError
	if !errors.As(err, &se) || se.Reason != sdk.StartPermissionDenied || se.Path != cfg.GetTaskDir() {
		t.Fatalf("StartTask as nobody in a 0700 root dir = %v, want a permission-denied StartError naming %s", err, cfg.GetTaskDir())
	}
	if !errors.Is(err, sdk.ErrTaskStartFailed) {
		t.Errorf("%v is not ErrTaskStartFailed", err)
	}
}
