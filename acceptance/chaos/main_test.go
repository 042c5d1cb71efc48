package chaos

import (
	"os"
	"testing"

	"berth.dev/berth/internal/testutil"
)

// berthBin is the berth binary the agents run: BERTH_BIN, or built once by
// TestMain.
var berthBin string

func TestMain(m *testing.M) {
	os.Exit(testutil.RunWithBerth(m, "chaos", "../..", &berthBin))
}
