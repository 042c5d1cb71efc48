package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVolumeLogCheckCatchesTwoWriters shows the log check can fail: a log
// in which one alloc wrote again after another began is two writers; a
// handover is one after the other; a torn line is caught too. It needs no
// root and runs in every go test.
func TestVolumeLogCheckCatchesTwoWriters(t *testing.T) {
	for _, tc := range []struct {
		name, log  string
		violations int
		writers    int
	}{
		{"handover", "a 1 10\na 2 20\nb 1 30\nb 2 40\n", 0, 2},
		{"interleaved", "a 1 10\nb 1 15\na 2 20\nb 2 25\n", 2, 2},
		{"torn", "a 1 10\na 2 2b 1 15\n", 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "log")
			if err := os.WriteFile(p, []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			_, writers, v := checkVolumeLog(p)
			if len(v) != tc.violations || writers != tc.writers {
				t.Fatalf("%d violations (%s), %d writers; want %d, %d", len(v), strings.Join(v, "; "), writers, tc.violations, tc.writers)
			}
		})
	}
}
