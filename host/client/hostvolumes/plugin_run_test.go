package hostvolumes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

func writePlugin(t *testing.T, dir, body string) *External {
	t.Helper()
	p := filepath.Join(dir, "plug")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nset -u\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return &External{ID: "plug", Path: p, PluginDir: dir, VolumesDir: filepath.Join(dir, "vols")}
}

// A plugin past its operation's deadline is killed with what it started
// (its process group), and the error says it did not answer in time.
func TestPluginDeadlineKillsItsProcessGroup(t *testing.T) {
	old := opTimeouts[OpCreate]
	opTimeouts[OpCreate] = 300 * time.Millisecond
	t.Cleanup(func() { opTimeouts[OpCreate] = old })
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	e := writePlugin(t, dir, "sleep 600 &\necho $! > "+pidFile+".tmp && mv "+pidFile+".tmp "+pidFile+"\nwait\n")
	_, err := e.Create(context.Background(), Request{ID: "v1", Name: "n", Path: filepath.Join(dir, "vols", "v1")})
	if !errors.Is(err, ErrPluginTimeout) || errcode.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("a hung plugin: %v", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the plugin's child %d outlived it", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The plugin gets PATH and DHV_* only (with Nomad's DHV_NAMESPACE and
// DHV_NODE_POOL, so a plugin under set -u runs); an {"error": …} answer
// fails with its message; more than 64 KiB of answer is an error; only
// the end of a long stderr is kept.
func TestPluginEnvAnswersAndBounds(t *testing.T) {
	t.Setenv("BERTH_AGENT_SECRET", "s3cret")
	dir := t.TempDir()
	e := writePlugin(t, dir, `case "$DHV_VOLUME_NAME" in
env) env | sort | tr '\n' ' ' >&2; exit 1 ;;
ns) echo "{\"path\": \"/x/$DHV_NAMESPACE-$DHV_NODE_POOL\", \"bytes\": 0}" ;;
err) echo '{"error": "quota exhausted"}' ;;
big) head -c 70000 /dev/zero | tr '\0' a ;;
noisy) head -c 5000 /dev/zero | tr '\0' e >&2; echo " the end" >&2; exit 2 ;;
esac
`)
	ctx := context.Background()
	_, err := e.Create(ctx, Request{ID: "v", Name: "env"})
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "PATH=") || !strings.Contains(err.Error(), "DHV_VOLUME_NAME=env") {
		t.Errorf("the plugin's environment: %v", err)
	}
	if r, err := e.Create(ctx, Request{ID: "v", Name: "ns"}); err != nil || r.Path != "/x/default-default" {
		t.Errorf("DHV_NAMESPACE, DHV_NODE_POOL: %v, %v", r, err)
	}
	if _, err := e.Create(ctx, Request{ID: "v", Name: "err"}); !errors.Is(err, ErrPluginFailed) || !strings.HasSuffix(err.Error(), "create: quota exhausted") {
		t.Errorf("an error answer: %v", err)
	}
	if _, err := e.Create(ctx, Request{ID: "v", Name: "big"}); !errors.Is(err, ErrPluginFailed) || !strings.Contains(err.Error(), "more than 65536 bytes") {
		t.Errorf("a long answer: %v", err)
	}
	_, err = e.Create(ctx, Request{ID: "v", Name: "noisy"})
	if err == nil || !strings.HasSuffix(err.Error(), "e the end") || len(err.Error()) > 1400 {
		t.Errorf("a long stderr: %d bytes: %.200v", len(err.Error()), err)
	}
}

// A plugin that answers and exits while a background child keeps its
// stdout open answers at once (not at its deadline, as a failure), and
// the child is killed with the plugin's process group.
func TestPluginBackgroundChildHoldingStdout(t *testing.T) {
	old := opTimeouts[OpCreate]
	opTimeouts[OpCreate] = 20 * time.Second
	t.Cleanup(func() { opTimeouts[OpCreate] = old })
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	e := writePlugin(t, dir, "sleep 1000 &\necho $! > "+pidFile+"\necho '{\"path\": \"/x\", \"bytes\": 7}'\n")
	start := time.Now()
	r, err := e.Create(context.Background(), Request{ID: "v1", Name: "n", Path: filepath.Join(dir, "vols", "v1")})
	if err != nil || r.Path != "/x" || r.Bytes != 7 {
		t.Fatalf("a plugin with a background child: %v, %v", r, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("answered after %s: it waited for the child", took)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the plugin's child %d outlived it", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
