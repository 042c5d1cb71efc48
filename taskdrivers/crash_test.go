package taskdrivers

import (
	"bufio"
	"context"
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

	"berth.dev/berth/builtin/drivers"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/internal/pluginsup"
)

// clientEnv makes this test binary a client: with the data dir it names,
// it starts a driver manager, starts a gated raw_exec task in
// <dir>/task, prints "ready <task pid>" and waits to be killed.
const clientEnv = "BERTH_TASKDRIVERS_CLIENT_DIR"

func runClientIfRequested() {
	dir := os.Getenv(clientEnv)
	if dir == "" {
		return
	}
	if err := runClient(dir); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	select {}
}

func runClient(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	db, err := state.Open(state.Path(dir))
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	plugins, err := Catalog(CatalogConfig{Executable: exe, Builtins: drivers.Plugins(), Plugins: []PluginConfig{rawExecEnabled}})
	if err != nil {
		return err
	}
	m, err := New(Config{Plugins: plugins, Store: db, Options: pluginsup.Options{Logger: hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Debug})}})
	if err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	d, err := m.Driver("raw_exec")
	if err != nil {
		return err
	}
	taskDir := filepath.Join(dir, "task")
	if err := os.MkdirAll(taskDir, 0o755); err != nil {
		return err
	}
	cfg, _ := gatedTaskIn(taskDir, "crash1", 9)
	if _, err := d.StartTask(ctx, cfg); err != nil {
		return err
	}
	st, err := d.InspectTask(ctx, "crash1")
	if err != nil {
		return err
	}
	fmt.Printf("ready %s\n", st.GetAttributes()["pid"])
	return nil
}

// TestClientKilledWithSIGKILLLeavesItsTaskRecoverable runs a client in a
// process of its own, kills it with SIGKILL while its raw_exec task runs,
// and starts a new client on the same data dir: it recovers the same task
// (reattaching to the orphaned plugin, or starting a new one if that
// plugin died with its parent's pipes) and gets its exit code.
func TestClientKilledWithSIGKILLLeavesItsTaskRecoverable(t *testing.T) {
	e := newEnv(t)
	e.db.Close() // the client process owns the data dir first
	cmd := exec.Command(testExecutable(t))
	cmd.Env = append(os.Environ(), clientEnv+"="+e.dataDir)
	cmd.Stderr = &lineLogger{t: t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("client process: %v (its log is above)", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "ready ")))
	if err != nil || !alive(pid) {
		t.Fatalf("client said %q", line)
	}
	killTaskAtEnd(t, pid)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	e.openDB()
	m := e.newManager(e.catalog(rawExecEnabled), nil)
	e.start(m)
	d := driver(t, m, "raw_exec")
	if got := taskPid(t, d, "crash1"); got != pid {
		t.Fatalf("task pid %d after the client was killed and restarted, was %d", got, pid)
	}
	waiting := waitInBackground(t, d, "crash1")
	release(t, filepath.Join(e.dataDir, "task", "release"))
	wantExit(t, waiting, 9)
	// Whatever plugins the killed client left behind are stopped now.
	if err := m.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitPluginsGone(t, e.dataDir)
}

// lineLogger sends a subprocess's stderr to t.Log.
type lineLogger struct {
	t *testing.T
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitPluginsGone waits until no plugin process of the killed client is
// left: each was either reattached (and stopped by Shutdown) or has died.
func waitPluginsGone(t *testing.T, dataDir string) {
	t.Helper()
	deadline := time.Now().Add(generous)
	for {
		var left []string
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || !alive(pid) {
				continue
			}
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if strings.Contains(string(cmdline), "builtin\x00driver") && strings.Contains(string(environ), clientEnv+"="+dataDir) {
				left = append(left, e.Name())
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugins of the killed client still run: pids %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
