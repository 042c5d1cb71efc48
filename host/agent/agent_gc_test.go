package agent

import (
	"runtime/debug"
	"testing"

	"berth.dev/berth/internal/testutil"
)

// gcPercent reads the collector's target (SetGCPercent is its only reader).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// An agent that runs a server sets the collector's target from its config;
// one that runs only a client leaves it alone. Not parallel: the setting is
// process-wide.
func TestServerAgentSetsGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	clientOnly := DevConfig()
	clientOnly.Ports = Ports{}
	clientOnly.Server.Enabled = false
	clientOnly.Client.Servers = []string{"127.0.0.1:1"}
	clientOnly.Server.GCPercent = 300
	a, err := New(clientOnly, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	a.Shutdown()
	if got := gcPercent(); got != 100 {
		t.Errorf("after a client-only agent: gc percent %d, want Go's 100 left alone", got)
	}

	for _, tc := range []struct {
		name string
		set  int
		want int
	}{
		{"configured", 300, 300},
		{"default config", DefaultConfig().Server.GCPercent, 200},
		{"zero from a Config built in Go", 0, 200},
	} {
		cfg := DevConfig()
		cfg.Ports = Ports{}
		cfg.Client.Enabled = false
		cfg.Server.GCPercent = tc.set
		a, err := New(cfg, testutil.Logger(t))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := gcPercent()
		a.Shutdown()
		if got != tc.want {
			t.Errorf("%s: server agent's gc percent %d, want %d", tc.name, got, tc.want)
		}
	}
}
