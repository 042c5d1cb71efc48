package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFiles writes files (slash-separated path relative to dir → content)
// under dir, creating directories as needed, and returns dir. A test that
// needs a throwaway source tree or config directory passes t.TempDir().
func WriteFiles(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	for name, src := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
