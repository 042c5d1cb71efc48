package acceptance

import (
	"os"
	"strconv"
	"testing"
)

// parseUint reads a protojson 64-bit integer (a decimal string); "" is 0.
func parseUint(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

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
