package allocdir

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// mkdir answers as os.MkdirAll does: a dir made under an existing parent
// or with its missing parents, an existing dir left as it is, and a file
// in the way refused.
func TestMkdirAnswersAsMkdirAll(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path string
		wantErr    bool
	}{
		{"parent there", filepath.Join(root, "a"), false},
		{"parents missing", filepath.Join(root, "b", "c", "d"), false},
		{"already there", filepath.Join(root, "a"), false},
		{"a file in the way", file, true},
		{"under a file", filepath.Join(file, "x"), true},
	} {
		err := mkdir(c.path, 0o755)
		if (err != nil) != c.wantErr {
			t.Errorf("%s: mkdir(%s) = %v, want error %v", c.name, c.path, err, c.wantErr)
		}
		if want := os.MkdirAll(c.path, 0o755); (want != nil) != (err != nil) {
			t.Errorf("%s: mkdir says %v, MkdirAll %v", c.name, err, want)
		}
		if c.wantErr {
			continue
		}
		if fi, err := os.Stat(c.path); err != nil || !fi.IsDir() {
			t.Errorf("%s: %s is not a dir: %v", c.name, c.path, err)
		}
	}
}

// BenchmarkBuild builds an alloc dir and one task's dirs, as a client does
// for every alloc it starts.
func BenchmarkBuild(b *testing.B) {
	root := b.TempDir()
	for i := 0; b.Loop(); i++ {
		a, err := New(root, "a"+strconv.Itoa(i))
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Build(); err != nil {
			b.Fatal(err)
		}
		td, _ := a.TaskDir("web")
		if err := td.Build(); err != nil {
			b.Fatal(err)
		}
	}
}
