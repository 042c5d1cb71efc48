package executor

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func mountOf(t *testing.T, dir string) (mountEntry, bool) {
	t.Helper()
	mounts, err := readMountinfo()
	if err != nil {
		t.Fatal(err)
	}
	var top mountEntry
	found := false
	for _, m := range mounts {
		if m.point == dir {
			top, found = m, true
		}
	}
	return top, found
}

// TestEnsureSharedAndRelease: a plain directory becomes a shared mount
// point of its own; asking again changes nothing; ReleaseShared refuses
// while something is mounted below it and removes it once nothing is.
func TestEnsureSharedAndRelease(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "with space")
	sub := filepath.Join(dir, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(sub, unix.MNT_DETACH); unix.Unmount(dir, unix.MNT_DETACH) })
	resolved, created, err := EnsureShared(dir)
	if err != nil || !created || resolved != dir {
		t.Fatalf("EnsureShared(%s) = %q, %v, %v; want it created", dir, resolved, created, err)
	}
	if m, ok := mountOf(t, dir); !ok || !m.shared {
		t.Fatalf("%s after EnsureShared: mount %+v (found %v), want a shared mount point", dir, m, ok)
	}
	if _, again, err := EnsureShared(dir); err != nil || again {
		t.Errorf("second EnsureShared: created %v, %v; want nothing to do", again, err)
	}
	if err := unix.Mount("tmp", sub, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if released, err := ReleaseShared(dir); err != nil || released {
		t.Errorf("ReleaseShared with a mount below: %v, %v; want it kept", released, err)
	}
	if err := unix.Unmount(sub, 0); err != nil {
		t.Fatal(err)
	}
	if released, err := ReleaseShared(dir); err != nil || !released {
		t.Errorf("ReleaseShared of an unused bind: %v, %v; want it removed", released, err)
	}
	if _, ok := mountOf(t, dir); ok {
		t.Errorf("%s is still a mount point after ReleaseShared", dir)
	}
	if _, _, err := EnsureShared(dir + "\x00/etc"); err == nil {
		t.Error("EnsureShared accepted a path with NUL")
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	if got := unescapeMountinfo(`/a\040b\011c\134d`); got != "/a b\tc\\d" {
		t.Errorf("unescape = %q", got)
	}
}

func TestSortBindsParentsFirst(t *testing.T) {
	binds := []Bind{{Target: "/a/b/c"}, {Target: "/x"}, {Target: "/a/b"}, {Target: "/a"}, {Target: "/y"}}
	SortBinds(binds)
	var got []string
	for _, b := range binds {
		got = append(got, b.Target)
	}
	if want := []string{"/x", "/a", "/y", "/a/b", "/a/b/c"}; !slices.Equal(got, want) {
		t.Errorf("SortBinds = %v, want %v", got, want)
	}
}

func TestIsolationValidate(t *testing.T) {
	good := Isolation{Root: "/r", Binds: []Bind{{Source: "/s", Target: "/t", Propagation: PropagationShared}, {Target: "/bin", Symlink: "usr/bin"}}}
	if err := good.validate(); err != nil {
		t.Fatalf("valid isolation: %v", err)
	}
	for name, iso := range map[string]Isolation{
		"relative root":       {Root: "r"},
		"NUL in source":       {Root: "/r", Binds: []Bind{{Source: "/s\x00", Target: "/t"}}},
		"NUL in target":       {Root: "/r", Binds: []Bind{{Source: "/s", Target: "/t\x00x"}}},
		"unclean target":      {Root: "/r", Binds: []Bind{{Source: "/s", Target: "/t/../../etc"}}},
		"root target":         {Root: "/r", Binds: []Bind{{Source: "/s", Target: "/"}}},
		"unknown propagation": {Root: "/r", Binds: []Bind{{Source: "/s", Target: "/t", Propagation: "sideways"}}},
		"relative mask":       {Root: "/r", Masks: []string{"state"}},
	} {
		if err := iso.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
