package sdk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/sdk/driverpb"
)

// serveFakeEnv makes this test binary serve fakeDriver as a plugin;
// serveOrphanEnv does the same after starting a child that holds the
// plugin's stderr, writing the child's PID to the file it names.
const (
	serveFakeEnv   = "BERTH_SDK_TEST_SERVE_FAKE"
	serveOrphanEnv = "BERTH_SDK_TEST_SERVE_ORPHAN"
)

func TestMain(m *testing.M) {
	if os.Getenv(brokenStderrEnv) == "1" {
		os.Exit(serveWithBrokenStderr())
	}
	if f := os.Getenv(serveOrphanEnv); f != "" {
		// A plugin that starts a process holding its stderr, as a driver
		// whose tasks inherit the plugin's stderr does.
		child := exec.Command("sleep", "120")
		child.Stderr = os.Stderr
		child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(f, []byte(strconv.Itoa(child.Process.Pid)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if os.Getenv(serveStorageEnv) == "1" {
		os.Exit(serveFakeStorage())
	}
	if os.Getenv(serveFakeEnv) == "1" || os.Getenv(serveOrphanEnv) != "" {
		if err := ServeDriver(newFakeDriver()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func fakePluginCmd() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveFakeEnv+"=1")
	return cmd
}

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: tWriter{t}, Level: hclog.Debug})
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func TestLaunchAndReattach(t *testing.T) {
	ctx := testCtx(t)
	p, err := LaunchDriver(ctx, LaunchConfig{Name: "fake", Cmd: fakePluginCmd(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if p.Driver().Name() != "fake" || p.Driver().APIVersion() != APIVersion || p.Pid() <= 0 {
		t.Errorf("launched %q v%d pid %d", p.Driver().Name(), p.Driver().APIVersion(), p.Pid())
	}
	ra, ok := p.Reattach()
	if !ok || ra.Pid != p.Pid() || ra.Network != "unix" || ra.Address == "" {
		t.Fatalf("Reattach = %+v, %v", ra, ok)
	}

	// A second client (berth after a restart) reattaches to the same process.
	again, err := LaunchDriver(ctx, LaunchConfig{Name: "fake", Reattach: &ra, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("reattach: %v", err)
	}
	if _, err := again.Driver().StartTask(ctx, &driverpb.TaskConfig{Id: "shared", DriverConfig: ConfigMap{"command": StringValue("x")}}); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Driver().InspectTask(ctx, "shared"); err != nil || st.GetId() != "shared" {
		t.Errorf("first client does not see the task the reattached one started: %v, %v", st, err)
	}

	again.Kill()
	deadline := time.Now().Add(time.Minute)
	for !p.Exited() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := p.Driver().InspectTask(ctx, "shared"); !errors.Is(err, ErrPluginShutdown) {
		t.Errorf("call after the plugin was killed = %v, want ErrPluginShutdown", err)
	}
}

func TestLaunchFailures(t *testing.T) {
	ctx := testCtx(t)
	if _, err := LaunchDriver(ctx, LaunchConfig{Name: "none"}); err == nil {
		t.Error("LaunchDriver without Cmd or Reattach succeeded")
	}
	if _, err := LaunchDriver(ctx, LaunchConfig{Name: "true", Cmd: exec.Command("/bin/true")}); err == nil {
		t.Error("LaunchDriver of a non-plugin succeeded")
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	hang := exec.Command("/bin/sh", "-c", `echo $$ > "$0"; exec sleep 1000`, pidFile)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := LaunchDriver(short, LaunchConfig{Name: "hang", Cmd: hang})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("LaunchDriver of a hanging command = %v, want DeadlineExceeded", err)
	}
	// The process is killed, if not at once then as the handshake gives up.
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	deadline := time.Now().Add(time.Minute)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("hanging command left running")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A plugin that dies while a process it started still holds its stderr is
// shut down: go-plugin never sees its end (it waits for the pipe), so the
// process is checked itself.
func TestPluginDeadWithAChildHoldingItsStderrIsShutDown(t *testing.T) {
	ctx := testCtx(t)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveOrphanEnv+"="+pidFile)
	p, err := LaunchDriver(ctx, LaunchConfig{Name: "fake", Cmd: cmd, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(child, syscall.SIGKILL) // before p.Kill, which waits for the pipe

	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !p.Exited() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !p.Exited() {
		t.Fatal("the killed plugin is never seen to exit while its child holds its stderr")
	}
	if _, err := p.Driver().InspectTask(ctx, "t1"); !errors.Is(err, ErrPluginShutdown) {
		t.Errorf("call to the killed plugin = %v, want ErrPluginShutdown", err)
	}
}
