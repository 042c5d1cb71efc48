package fsm_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"berth.dev/berth/fsm"
)

// splitNoise matches what only the split form adds to a script's output:
// csi_plugin_instances rows and index records in snapshot lines and its
// table index in state dumps, and a snapshot's record counts, which those
// records move.
var splitNoise = regexp.MustCompile(`\s*(index:)?csi_plugin_instances[:=]\S+|\s*end:\d+|record \d+|after \d+ records`)

// TestScriptsSplitPlugins runs every script of testdata with the
// pluginInstancesSince gate forced on, so the plugin rows keep their
// instances in csi_plugin_instances, and holds it to the same expected
// output (up to splitNoise): every behaviour the scripts pin for the
// plugin table (counts, provider, controller_required, plugin switches,
// the volumes' mirrors, skipped publishes, modify indexes) is the same
// in both forms. Not parallel: the gate is forced for the package.
func TestScriptsSplitPlugins(t *testing.T) {
	defer fsm.ForceInstancesSplit(true)()
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newScriptHarness(t)
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			out := h.run(t, td)
			if splitNoise.ReplaceAllString(out, "") == splitNoise.ReplaceAllString(td.Expected, "") {
				return td.Expected
			}
			return out
		})
	})
}

// TestScriptsSplitPluginsWritesInstances checks that the forced gate
// does split: a plugin script leaves its rows in csi_plugin_instances.
func TestScriptsSplitPluginsWritesInstances(t *testing.T) {
	defer fsm.ForceInstancesSplit(true)()
	h := newScriptHarness(t)
	datadriven.RunTest(t, "testdata/plugin_switch.txt", func(t *testing.T, td *datadriven.TestData) string {
		out := h.run(t, td)
		if splitNoise.ReplaceAllString(out, "") == splitNoise.ReplaceAllString(td.Expected, "") {
			return td.Expected
		}
		return out
	})
	p, insts, err := h.fsm.State().CSIPluginRaw("hostpath")
	if err != nil {
		t.Fatal(err)
	}
	if p == nil || !p.GetInstancesSplit() || len(p.GetControllers())+len(p.GetNodes()) != 0 || len(insts) == 0 {
		t.Fatalf("plugin row %v with %d instance rows: want a split row and its instances", p, len(insts))
	}
	if !strings.Contains(describeState(t, h), "csi_plugin_instances=") {
		t.Fatalf("state index has no csi_plugin_instances")
	}
}

func describeState(t *testing.T, h *scriptHarness) string {
	s, err := dumpState(h.fsm.State())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
