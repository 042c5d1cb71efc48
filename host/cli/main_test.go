package cli

import (
	"os"
	"testing"
)

// The agent runs built-in drivers and storage adapters by re-executing its
// own binary with `builtin driver NAME` or `builtin csi-adapter NAME`; in
// tests that binary is this one, so such a run goes through the real
// command (and, for raw_exec's task executors, the same command line
// again).
func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == "builtin" && (os.Args[2] == "driver" || os.Args[2] == "csi-adapter") {
		os.Exit(Main(os.Args))
	}
	os.Exit(m.Run())
}
