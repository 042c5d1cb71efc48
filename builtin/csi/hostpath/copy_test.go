//go:build linux

package hostpath

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCopyTreeKeepsMetadataAndHoles(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.MkdirAll(filepath.Join(src, "sub"), 0o755), "mkdir")
	must(t, os.WriteFile(filepath.Join(src, "sub", "file"), []byte("content"), 0o640), "write")
	must(t, os.Chmod(filepath.Join(src, "sub"), 0o710), "chmod sub")
	must(t, os.Symlink("sub/file", filepath.Join(src, "link")), "symlink")
	must(t, unix.Mkfifo(filepath.Join(src, "fifo"), 0o600), "mkfifo")
	sparse, err := os.Create(filepath.Join(src, "sparse"))
	must(t, err, "create sparse")
	must(t, sparse.Truncate(64*mib), "truncate")
	_, err = sparse.WriteAt([]byte("tail"), 64*mib-4)
	must(t, err, "write tail")
	sparse.Close()
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	must(t, os.Chtimes(filepath.Join(src, "sub", "file"), old, old), "chtimes")

	dst := filepath.Join(t.TempDir(), "dst")
	must(t, copyTree(context.Background(), src, dst), "copyTree")

	if b, err := os.ReadFile(filepath.Join(dst, "sub", "file")); err != nil || string(b) != "content" {
		t.Fatalf("copied file %q, %v", b, err)
	}
	for path, want := range map[string]os.FileMode{"sub": 0o710, "sub/file": 0o640} {
		fi, err := os.Stat(filepath.Join(dst, path))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, %v; want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dst, "sub", "file")); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("mtime not kept: %v, %v", fi.ModTime(), err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "link")); err != nil || l != "sub/file" {
		t.Errorf("symlink %q, %v", l, err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("fifo not recreated: %v, %v", fi, err)
	}
	u, err := diskUsage(context.Background(), filepath.Join(dst, "sparse"))
	must(t, err, "diskUsage")
	if u.bytes > mib {
		t.Errorf("sparse 64MiB file takes %d bytes after the copy; holes were filled", u.bytes)
	}
	b := make([]byte, 4)
	f, err := os.Open(filepath.Join(dst, "sparse"))
	must(t, err, "open copy")
	defer f.Close()
	if _, err := f.ReadAt(b, 64*mib-4); err != nil || string(b) != "tail" {
		t.Errorf("sparse copy ends with %q, %v", b, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := copyTree(ctx, src, filepath.Join(t.TempDir(), "cancelled")); err == nil {
		t.Error("copyTree ignored a cancelled context")
	}
}
