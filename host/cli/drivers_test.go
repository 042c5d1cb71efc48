package cli

import (
	"strings"
	"testing"

	"berth.dev/berth/internal/version"
	"berth.dev/berth/sdk"
)

func TestNodeStatusListsDrivers(t *testing.T) {
	a := startAgent(t)
	t.Setenv("BERTH_ADDR", "http://"+a.HTTPAddr())
	code, out, errOut := berth(t, "node", "status", "-verbose", a.Client().NodeID())
	if code != 0 {
		t.Fatalf("node status: exit %d %s", code, errOut)
	}
	for _, name := range []string{"mock", "raw_exec"} {
		var row string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, name+" ") {
				row = line
			}
		}
		fields := strings.Fields(row)
		if len(fields) < 5 || fields[1] != "true" || fields[2] != "builtin" || fields[3] != version.Version || fields[4] != "healthy" {
			t.Fatalf("driver row for %s is %q in\n%s", name, row, out)
		}
	}
	if !strings.Contains(out, "Driver raw_exec Attributes") || !strings.Contains(out, "driver.raw_exec.version") {
		t.Fatalf("no driver attributes in -verbose output:\n%s", out)
	}
}

func TestBuiltinDriverCommandRefusesToRunByHand(t *testing.T) {
	code, _, errOut := berth(t, "builtin", "driver", "mock")
	if code != 1 || !strings.Contains(errOut, sdk.ErrNotPluginProcess.Error()) {
		t.Fatalf("builtin driver run by hand: exit %d, %q", code, errOut)
	}
	code, _, errOut = berth(t, "builtin", "driver", "nope")
	if code != 1 || !strings.Contains(errOut, `"nope"`) {
		t.Fatalf("unknown built-in driver: exit %d, %q", code, errOut)
	}
}
