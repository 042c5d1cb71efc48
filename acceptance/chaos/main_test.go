package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// berthBin is the berth binary the agents run: BERTH_BIN, or built once by
// TestMain.
var berthBin string

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	if b := os.Getenv("BERTH_BIN"); b != "" {
		berthBin = b
		return m.Run(), nil
	}
	dir, err := os.MkdirTemp("", "berth-chaos-bin-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	berthBin = filepath.Join(dir, "berth")
	cmd := exec.Command("go", "build", "-o", berthBin, "../..")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("building berth: %w", err)
	}
	return m.Run(), nil
}
