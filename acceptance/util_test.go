package acceptance

import (
	"os"
	"testing"
)

// truncate cuts the last 100 bytes off a file.
func truncate(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, max(st.Size()-100, 1)); err != nil {
		t.Fatal(err)
	}
}
