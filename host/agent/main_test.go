package agent

import (
	"os"
	"testing"

	"berth.dev/berth/builtin/csi/adapters"
	"berth.dev/berth/builtin/drivers"
)

// The agent runs built-in drivers and storage adapters by re-executing its
// own binary, which in tests is this test binary: serve them when asked to.
func TestMain(m *testing.M) {
	drivers.MainIfRequested(os.Args)
	adapters.MainIfRequested(os.Args)
	os.Exit(m.Run())
}
