package ociarchive

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseLdd(t *testing.T) {
	out := `	linux-vdso.so.1 (0x00007ffd6b9f2000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2a1c000000)
	libm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f2a1bf00000)
	/lib64/ld-linux-x86-64.so.2 (0x00007f2a1c200000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2a1c000000)
`
	got, err := parseLdd([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libm.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if !slices.Equal(got, want) {
		t.Fatalf("parseLdd: %q, want %q", got, want)
	}
	if _, err := parseLdd([]byte("\tlibfoo.so.1 => not found\n")); err == nil || !strings.Contains(err.Error(), "libfoo.so.1 not found") {
		t.Fatalf("a missing library: %v, want an error naming it", err)
	}
	if _, err := parseLdd([]byte("\tlibfoo.so => /lib/../etc/x (0x1)\n")); err == nil {
		t.Fatal("an unclean library path was accepted")
	}
}

func FuzzParseLdd(f *testing.F) {
	f.Add([]byte("\tlinux-vdso.so.1 (0x1)\n\tlibc.so.6 => /lib/libc.so.6 (0x2)\n\t/lib64/ld.so (0x3)\n"))
	f.Add([]byte("\tlibx => not found\n"))
	f.Add([]byte("statically linked\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		libs, err := parseLdd(out)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, l := range libs {
			if !filepath.IsAbs(l) || filepath.Clean(l) != l || seen[l] {
				t.Fatalf("parseLdd(%q) gave %q", out, libs)
			}
			seen[l] = true
		}
	})
}

// TestExecutable: a dynamic executable comes with its interpreter and
// libraries as ldd lists them, a static one alone.
func TestExecutable(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh in PATH")
	}
	sh, err = filepath.EvalSymlinks(sh)
	if err != nil {
		t.Fatal(err)
	}
	files, err := Executable(sh, "/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	if files[0].Path != "/bin/sh" || files[0].Source != sh {
		t.Fatalf("first file %+v, want %s at /bin/sh", files[0], sh)
	}
	f, err := elf.Open(sh)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		if len(files) != 1 {
			t.Fatalf("static %s came with %+v", sh, files[1:])
		}
		return
	}
	var paths []string
	for _, f := range files[1:] {
		paths = append(paths, f.Path)
		if f.Source != f.Path {
			t.Fatalf("library %+v is not stored where this machine has it", f)
		}
	}
	if !slices.Contains(paths, interp) || !slices.ContainsFunc(paths, func(p string) bool { return strings.Contains(filepath.Base(p), "libc.so") }) {
		t.Fatalf("%s's files %q lack its interpreter %s or libc", sh, paths, interp)
	}

	// A static executable: a Go program built without cgo.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module static\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", "static", ".")
	build.Dir, build.Env = dir, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a static program: %v\n%s", err, out)
	}
	static, err := Executable(filepath.Join(dir, "static"), "/static")
	if err != nil || len(static) != 1 {
		t.Fatalf("a static executable's files: %+v (%v), want itself only", static, err)
	}
}
