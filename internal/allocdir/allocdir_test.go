package allocdir

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"berth.dev/berth/internal/testutil"
)

func TestBuildLaysOutDirsAndDestroyRemovesThem(t *testing.T) {
	data := t.TempDir()
	a, err := New(data, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Build(); err != nil {
		t.Fatal(err)
	}
	td, err := a.TaskDir("web")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(td.Secrets, 0o777); err != nil { // loose, as if tampered with
		t.Fatal(err)
	}
	if err := td.Build(); err != nil {
		t.Fatal(err)
	}
	if err := td.Build(); err != nil { // idempotent
		t.Fatal(err)
	}
	for _, rel := range []string{"alloc/a1/alloc/data", "alloc/a1/alloc/tmp", "alloc/a1/alloc/logs",
		"alloc/a1/web/local", "alloc/a1/web/secrets", "alloc/a1/web/tmp"} {
		if fi, err := os.Stat(filepath.Join(data, rel)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", rel, err)
		}
	}
	fi, err := os.Stat(td.Secrets)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("secrets dir mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	if td.LogDir != filepath.Join(data, "alloc/a1/alloc/logs") || td.Dir != filepath.Join(data, "alloc/a1/web") {
		t.Fatalf("task dir %+v", td)
	}
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("alloc dir after Destroy: %v", err)
	}
	if err := a.Destroy(); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
}

func TestNamesThatEscapeAreRefused(t *testing.T) {
	for _, id := range []string{"", ".", "..", "a/b"} {
		if _, err := New(t.TempDir(), id); !errors.Is(err, ErrInvalidName) {
			t.Errorf("New(%q): %v", id, err)
		}
	}
	a, _ := New(t.TempDir(), "a1")
	for _, task := range []string{"", "..", "x/y", SharedName} {
		if _, err := a.TaskDir(task); !errors.Is(err, ErrInvalidName) {
			t.Errorf("TaskDir(%q): %v", task, err)
		}
	}
}

func TestLogFilesInOrder(t *testing.T) {
	a, _ := New(t.TempDir(), "a1")
	logs, err := a.Logs("web")
	if err != nil {
		t.Fatal(err)
	}
	if files, err := logs.Files(false); err != nil || files != nil {
		t.Fatalf("no log dir: %v, %v", files, err)
	}
	if err := a.Build(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web.stdout.10", "web.stdout.2", "web.stderr.0", "web.stdout.x", "webby.stdout.0", "web.stdout.0"} {
		if err := os.WriteFile(filepath.Join(a.LogDir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := logs.Files(false)
	want := []string{"web.stdout.0", "web.stdout.2", "web.stdout.10"}
	for i := range want {
		want[i] = filepath.Join(a.LogDir, want[i])
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("LogFiles = %v, %v; want %v", got, err, want)
	}
	if got, _ := logs.Files(true); len(got) != 1 || got[0] != filepath.Join(a.LogDir, "web.stderr.0") {
		t.Fatalf("stderr files %v", got)
	}
	if logs.Prefix(true) != "web.stderr." || logs.Prefix(false) != "web.stdout." {
		t.Fatalf("prefixes %q %q", logs.Prefix(true), logs.Prefix(false))
	}
	if _, err := a.Logs("../x"); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("Logs(../x): %v", err)
	}
}

// Destroy unmounts what is still mounted under the alloc dir (a writable
// bind a crash left behind) before it removes the tree, so the removal
// never deletes through the mount.
func TestDestroyUnmountsBeforeItRemoves(t *testing.T) {
	testutil.RequireRoot(t, "bind-mounts a directory under the alloc dir")
	volume := t.TempDir()
	if err := os.WriteFile(filepath.Join(volume, "data"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := New(t.TempDir(), "a1")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Build(); err != nil {
		t.Fatal(err)
	}
	td, err := a.TaskDir("web")
	if err != nil {
		t.Fatal(err)
	}
	if err := td.Build(); err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, rel := range []string{"csi-volumes/v1", "csi-volumes/v1/nested"} {
		target := filepath.Join(td.Dir, rel)
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(volume, target, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, target)
	}
	t.Cleanup(func() {
		for _, p := range targets {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	})
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(volume, "data")); err != nil || string(b) != "keep me" {
		t.Fatalf("the mounted directory's file after Destroy: %q, %v", b, err)
	}
	if _, err := os.Stat(a.Dir); !os.IsNotExist(err) {
		t.Fatalf("alloc dir after Destroy: %v", err)
	}
}
