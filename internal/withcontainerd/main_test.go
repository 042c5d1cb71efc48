package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/internal/containerdtest"
	"berth.dev/berth/internal/testutil"
)

// toolBin is this program, built once by TestMain.
var toolBin string

func tool(t *testing.T) string {
	t.Helper()
	if toolBin == "" {
		t.Fatal("withcontainerd was not built")
	}
	return toolBin
}

// env is this process's environment without the variables the tool
// reads, plus more.
func env(more ...string) []string {
	var out []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, containerdtest.EnvAddress+"=") && !strings.HasPrefix(e, testutil.EnvCI+"=") {
			out = append(out, e)
		}
	}
	return append(out, more...)
}

// TestRunsTheCommandWithAPrivateContainerd: the command gets a socket that
// answers, in a directory of its own; its exit status is the tool's; the
// daemon and its directory are gone when the tool returns.
func TestRunsTheCommandWithAPrivateContainerd(t *testing.T) {
	testutil.RequireRoot(t, "containerd runs as root")
	for _, b := range []string{"containerd", "runc", "ctr"} {
		if _, err := exec.LookPath(b); err != nil {
			testutil.Unavailable(t, "no %s binary in PATH (make containerd-deps installs Debian's)", b)
		}
	}
	out := filepath.Join(t.TempDir(), "address")
	cmd := exec.Command(tool(t), "--", "/bin/sh", "-c",
		`printf %s "$`+containerdtest.EnvAddress+`" > "$0" && ctr --address "$`+containerdtest.EnvAddress+`" version >/dev/null && exit 3`, out)
	cmd.Env = env()
	combined, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("withcontainerd: %v, want exit status 3 (the command's)\n%s", err, combined)
	}
	b, err := os.ReadFile(out)
	if err != nil || len(b) == 0 {
		t.Fatalf("the command saw no address (%v)\n%s", err, combined)
	}
	addr := string(b)
	if _, err := os.Stat(filepath.Dir(addr)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the daemon's directory %s is left (%v)\n%s", filepath.Dir(addr), err, combined)
	}
}

// TestKeepsAGivenAddress: with BERTH_CONTAINERD_ADDRESS set, the command
// runs with it and no daemon of the tool's.
func TestKeepsAGivenAddress(t *testing.T) {
	cmd := exec.Command(tool(t), "--", "/bin/sh", "-c", `printf %s "$`+containerdtest.EnvAddress+`"`)
	cmd.Env = env(containerdtest.EnvAddress + "=/run/elsewhere.sock")
	out, err := cmd.Output()
	if err != nil || string(out) != "/run/elsewhere.sock" {
		t.Fatalf("withcontainerd: %q (%v), want the given address passed on", out, err)
	}
}

// TestWithoutContainerd: no containerd in PATH, the command runs without an
// address (its tests skip); under CI=true the tool fails and the command
// does not run.
func TestWithoutContainerd(t *testing.T) {
	bin := tool(t)
	empty := t.TempDir()
	marker := filepath.Join(t.TempDir(), "ran")
	run := func(ci bool) (string, error) {
		cmd := exec.Command(bin, "--", "/bin/sh", "-c", `printf %s "$`+containerdtest.EnvAddress+`" > "$0"`, marker)
		cmd.Env = append(env("PATH="+empty), testutil.EnvCI+"="+map[bool]string{true: "true", false: "false"}[ci])
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(false)
	if err != nil {
		t.Fatalf("without containerd: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(marker); err != nil || len(b) != 0 {
		t.Fatalf("without containerd the command ran with address %q (%v), want it run with none", b, err)
	}
	if !strings.Contains(out, "will be skipped") {
		t.Fatalf("without containerd the tool said %q, want the reason and that the tests skip", out)
	}
	os.Remove(marker)
	out, err = run(true)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "CI=true") {
		t.Fatalf("without containerd under CI: %v\n%s; want exit 1 naming CI", err, out)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("under CI the command ran anyway (%v)", err)
	}
}

// envHelper makes this test binary the tool's command in
// TestSignalsReachTheCommand: it writes the address it got to the file
// named by the variable and exits 7 at SIGTERM.
const envHelper = "WITHCONTAINERD_TEST_HELPER"

func TestMain(m *testing.M) {
	if out := os.Getenv(envHelper); out != "" {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		if err := os.WriteFile(out+".tmp", []byte(os.Getenv(containerdtest.EnvAddress)), 0o644); err != nil {
			os.Exit(1)
		}
		if err := os.Rename(out+".tmp", out); err != nil {
			os.Exit(1)
		}
		<-sig
		os.Exit(7)
	}
	dir, err := os.MkdirTemp("", "withcontainerd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	toolBin = filepath.Join(dir, "withcontainerd")
	if out, err := exec.Command("go", "build", "-o", toolBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building withcontainerd: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestSignalsReachTheCommand: SIGTERM to the tool reaches the command,
// whose exit status is the tool's, and the daemon is stopped and its
// directory removed.
func TestSignalsReachTheCommand(t *testing.T) {
	testutil.RequireRoot(t, "containerd runs as root")
	for _, b := range []string{"containerd", "runc", "ctr"} {
		if _, err := exec.LookPath(b); err != nil {
			testutil.Unavailable(t, "no %s binary in PATH (make containerd-deps installs Debian's)", b)
		}
	}
	out := filepath.Join(t.TempDir(), "address")
	cmd := exec.Command(tool(t), "--", os.Args[0], "-test.run=^$")
	cmd.Env = env(envHelper + "=" + out)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var addr string
	testutil.WaitFor(t, 30*time.Second, func() error {
		b, err := os.ReadFile(out)
		if err != nil {
			return err
		}
		addr = string(b)
		return nil
	})
	if addr == "" {
		t.Fatalf("the command got no address\n%s", logs.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("withcontainerd did not end after SIGTERM\n%s", logs.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("withcontainerd after SIGTERM: %v, want exit status 7 (the command's)\n%s", err, logs.String())
	}
	if _, err := os.Stat(filepath.Dir(addr)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the daemon's directory %s is left (%v)\n%s", filepath.Dir(addr), err, logs.String())
	}
}
