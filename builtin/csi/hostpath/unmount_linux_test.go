//go:build linux

package hostpath

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// unmountAll takes down every mount stacked at a path, and is content with
// a path that is not a mount point or does not exist, without reading the
// mount table.
func TestUnmountAllStackedPlainAndMissing(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	src, target := filepath.Join(dir, "src"), filepath.Join(dir, "target")
	for _, d := range []string{src, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for range 3 {
			_ = unix.Unmount(target, unix.MNT_DETACH)
		}
	})
	if n := mountCount(t, target); n != 3 {
		t.Fatalf("%d mounts stacked at the target, want 3", n)
	}
	if err := unmountAll(target); err != nil {
		t.Fatal(err)
	}
	if n := mountCount(t, target); n != 0 {
		t.Fatalf("%d mounts left at the target", n)
	}
	if err := unmountAll(target); err != nil {
		t.Errorf("a directory that is no mount point: %v", err)
	}
	if err := unmountAll(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("a missing path: %v", err)
	}
}
