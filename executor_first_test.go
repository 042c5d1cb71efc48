package main

import "testing"

// A built-in driver's executor (and namespace init) is recognised from its
// command line and its marker, before the CLI is built; nothing else is.
func TestExecutorRequestedBeforeTheCLI(t *testing.T) {
	driver := []string{"/usr/bin/berth", "builtin", "driver", "exec"}
	for _, c := range []struct {
		marker string
		args   []string
		want   bool
	}{
		{"1", driver, true},
		{"init", driver, true},
		{"standby", driver, true},
		{"standby-isolated", driver, true},
		{"standby", []string{"/usr/bin/berth", "version"}, false},
		{"", driver, false},
		{"1", []string{"/usr/bin/berth", "version"}, false},
		{"1", []string{"/usr/bin/berth", "builtin", "csi-hostpath"}, false},
		{"1", []string{"/usr/bin/berth"}, false},
	} {
		t.Setenv("BERTH_EXECUTOR", c.marker)
		if got := executorRequested(c.args); got != c.want {
			t.Errorf("BERTH_EXECUTOR=%q %v: executor %t, want %t", c.marker, c.args, got, c.want)
		}
	}
}
