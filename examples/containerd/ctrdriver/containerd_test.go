package ctrdriver_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
)

// AddressEnv names a containerd socket the tests use instead of starting
// their own (the test set-up of `make test` starts one and sets it).
const AddressEnv = "BERTH_CONTAINERD_ADDRESS"

// needOwnContainerd is needContainerd for tests that run a containerd of
// their own whatever AddressEnv says.
func needOwnContainerd(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root to run containerd and containers"
	} else if _, err := exec.LookPath("containerd"); err != nil {
		why = "needs the containerd binary (Debian package containerd)"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: %s", why)
	}
	t.Skip(why)
}

// needContainerd skips the test (fails it under CI=true) when it cannot
// run containerd: it needs root and the containerd binary.
func needContainerd(t testing.TB) {
	t.Helper()
	why := ""
	switch {
	case os.Getenv(AddressEnv) != "":
		return
	case os.Geteuid() != 0:
		why = "needs root to run containerd and containers"
	default:
		if _, err := exec.LookPath("containerd"); err != nil {
			why = "needs the containerd binary (Debian package containerd)"
		} else if _, err := exec.LookPath("runc"); err != nil {
			why = "needs runc (Debian package runc)"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: %s (or set %s)", why, AddressEnv)
	}
	t.Skipf("%s (or set %s)", why, AddressEnv)
}

var (
	privateOnce sync.Once
	privateAddr string
	privateErr  error
	privateStop func()
)

// The private daemon below repeats what berth's internal/containerdtest
// does (config, start, stop with leftovers and shims): this module may
// import nothing of berth but the sdk, and a containerd runner is no part
// of a plugin SDK, so the copy stays, small and test-only.

// containerdAddress is the socket of the containerd the tests use:
// AddressEnv's, or a private one this test binary starts once (own root,
// state and socket under a temp dir, CRI off) and stops in TestMain.
func containerdAddress(t testing.TB) string {
	t.Helper()
	needContainerd(t)
	if a := os.Getenv(AddressEnv); a != "" {
		return a
	}
	privateOnce.Do(func() { privateAddr, privateStop, privateErr = startContainerd() })
	if privateErr != nil {
		t.Fatalf("start a private containerd: %v", privateErr)
	}
	return privateAddr
}

// stopPrivateContainerd stops the containerd containerdAddress started.
func stopPrivateContainerd() {
	if privateStop != nil {
		privateStop()
	}
}

func startContainerd() (string, func(), error) {
	// Unix socket paths are short: a short temp dir.
	dir, err := os.MkdirTemp("", "berth-ctrd-")
	if err != nil {
		return "", nil, err
	}
	addr, kill, err := runContainerd(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return addr, func() {
		// The tests destroy their tasks, so no container should be left;
		// what a failed test left is killed and deleted, its shims killed,
		// and what it left mounted goes before the directory.
		removeLeftovers(addr)
		kill()
		killShims(addr)
		unmountUnder(filepath.Join(dir, "state"))
		unmountUnder(filepath.Join(dir, "root"))
		os.RemoveAll(dir)
	}, nil
}

// runContainerd runs containerd with root, state and socket in dir (its
// config.toml written there), waits for its socket, and returns it with a
// function stopping that containerd (SIGTERM, then SIGKILL after 10s; the
// containers' shims live on, as they do when containerd restarts).
func runContainerd(dir string) (string, func(), error) {
	addr := filepath.Join(dir, "containerd.sock")
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), addr, addr+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		return "", nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a test's interrupt does not reach it first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		logf.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if conn, err := net.Dial("unix", addr); err == nil {
			conn.Close()
			return addr, stop, nil
		}
		select {
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(logf.Name())
			stop()
			return "", nil, fmt.Errorf("containerd exited: %v\n%s", err, log)
		case <-ctx.Done():
			stop()
			return "", nil, fmt.Errorf("containerd socket %s did not appear within 30s", addr)
		case <-tick.C:
		}
	}
}

// unmountUnder detaches whatever containerd left mounted under dir (an
// overlay of a killed container), so the temp dir can be removed.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		var f [5]string
		n, _ := fmt.Sscan(line, &f[0], &f[1], &f[2], &f[3], &f[4])
		if n == 5 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// removeLeftovers kills and deletes every task and container left in any
// namespace of the containerd at addr, so none outlives the daemon.
func removeLeftovers(addr string) {
	c, err := client.New(addr)
	if err != nil {
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nss, err := c.NamespaceService().List(ctx)
	if err != nil {
		return
	}
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		ctrs, err := c.Containers(nctx)
		if err != nil {
			continue
		}
		for _, ctr := range ctrs {
			if proc, err := ctr.Task(nctx, nil); err == nil {
				proc.Delete(nctx, client.WithProcessKill)
			}
			ctr.Delete(nctx, client.WithSnapshotCleanup)
		}
	}
}

// killShims kills, by PID, the shims of the containerd at addr that
// outlived it: their command line names its socket after -address.
func killShims(addr string) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if i := slices.Index(args, "-address"); i >= 0 && i+1 < len(args) && args[i+1] == addr &&
			strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
