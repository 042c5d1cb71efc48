package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RunWithBerth runs a test binary's tests (from TestMain) with *bin naming
// the berth binary they start: BERTH_BIN when set, else one built once from
// root (the module's root, relative to the test's directory) into a
// temporary directory removed afterwards. A failed build is reported on
// stderr, prefixed with name, and is exit code 2.
func RunWithBerth(m *testing.M, name, root string, bin *string) int {
	if b := os.Getenv("BERTH_BIN"); b != "" {
		*bin = b
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "berth-"+name+"-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	defer os.RemoveAll(dir)
	*bin = filepath.Join(dir, "berth")
	cmd := exec.Command("go", "build", "-o", *bin, root)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: building berth: %v\n", name, err)
		return 2
	}
	return m.Run()
}
