package hostpath

import (
	"errors"
	"strings"
	"testing"
)

func TestParseCapacity(t *testing.T) {
	good := map[string]int64{
		"0":         0,
		"1048576":   1 << 20,
		"10GiB":     10 << 30,
		"500MiB":    500 << 20,
		"500 MiB":   500 << 20,
		"1G":        1_000_000_000,
		"1GB":       1_000_000_000,
		"1gib":      1 << 30,
		"2Ki":       2048,
		"1.5TiB":    3 << 39,
		"0.5K":      500,
		"8PiB":      8 << 50,
		" 64MiB ":   64 << 20,
		"7B":        7,
		"1.0000GiB": 1 << 30,
	}
	for in, want := range good {
		got, err := ParseCapacity(in)
		if err != nil || got != want {
			t.Errorf("ParseCapacity(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := []string{"", "GiB", "-1GiB", "10XB", "1.2.3G", ".", "0.1B", "1.5", "9999999PiB", "1e9", "ten", "10 GiB extra"}
	for _, in := range bad {
		got, err := ParseCapacity(in)
		if err == nil {
			t.Errorf("ParseCapacity(%q) = %d, want an error", in, got)
			continue
		}
		if !errors.Is(err, ErrBadCapacity) {
			t.Errorf("ParseCapacity(%q) error %v does not wrap ErrBadCapacity", in, err)
		}
		if !strings.Contains(err.Error(), strings.TrimSpace(in)) {
			t.Errorf("ParseCapacity(%q) error %q does not quote the input", in, err)
		}
	}
}

func FuzzParseCapacity(f *testing.F) {
	for _, s := range []string{"10GiB", "500MiB", "1G", "1.5TiB", "0", "", "-1", "1e3", "0.001KiB", "9223372036854775807", "9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseCapacity(s)
		if err != nil {
			if !errors.Is(err, ErrBadCapacity) {
				t.Fatalf("ParseCapacity(%q): error %v does not wrap ErrBadCapacity", s, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseCapacity(%q) = %d, negative", s, n)
		}
	})
}

func TestParseTopology(t *testing.T) {
	got, err := ParseTopology([]string{"zone=z1", "rack=r7, example.com/row=3"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"zone": "z1", "rack": "r7", "example.com/row": "3"}
	if !equalMaps(got, want) {
		t.Fatalf("ParseTopology = %v, want %v", got, want)
	}
	for _, in := range [][]string{
		{"zone"},                  // no value
		{"zone="},                 // empty value
		{"=z1"},                   // empty key
		{"zone=z 1"},              // space in value
		{"Bad_Prefix.com/x=1"},    // prefix not a DNS subdomain
		{"zone=z1", "zone=z2"},    // conflicting duplicate
		{PoolTopologyKey + "=p1"}, // reserved key
		{"zone=" + strings.Repeat("a", 64)},
	} {
		if _, err := ParseTopology(in); !errors.Is(err, ErrBadTopology) {
			t.Errorf("ParseTopology(%q) error = %v, want ErrBadTopology", in, err)
		}
	}
}

func FuzzParseTopology(f *testing.F) {
	for _, s := range []string{"zone=z1", "a=b,c=d", "example.com/k=v", "=", ",,", "k=v=w"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseTopology([]string{s})
		if err != nil {
			return
		}
		for k, v := range m {
			if err := validateSegment(k, v); err != nil {
				t.Fatalf("ParseTopology(%q) accepted %s=%s: %v", s, k, v, err)
			}
		}
	})
}

func TestConfigValidate(t *testing.T) {
	base := Config{Endpoint: "unix:///tmp/x.sock", NodeID: "n1", StateDir: "/tmp/state"}
	cases := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"no endpoint", func(c *Config) { c.Endpoint = "" }, "Endpoint"},
		{"tcp endpoint", func(c *Config) { c.Endpoint = "tcp://127.0.0.1:1" }, "Endpoint"},
		{"long socket path", func(c *Config) { c.Endpoint = "/tmp/" + strings.Repeat("s", 120) }, "Endpoint"},
		{"no state dir", func(c *Config) { c.StateDir = "" }, "StateDir"},
		{"bad mode", func(c *Config) { c.Mode = "both" }, "Mode"},
		{"no node id", func(c *Config) { c.NodeID = "" }, "NodeID"},
		{"node id with slash", func(c *Config) { c.NodeID = "../etc" }, "NodeID"},
		{"negative capacity", func(c *Config) { c.Capacity = -1 }, "Capacity"},
		{"negative max volumes", func(c *Config) { c.MaxVolumes = -1 }, "MaxVolumes"},
		{"negative max volume size", func(c *Config) { c.MaxVolumeSize = -1 }, "MaxVolumeSize"},
		{"bad topology", func(c *Config) { c.Topology = map[string]string{"zone": "a b"} }, "Topology"},
	}
	for _, tc := range cases {
		cfg := base
		tc.edit(&cfg)
		_, err := cfg.validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s: error %v, want a ConfigError for %s", tc.name, err, tc.field)
		}
	}

	rc, err := base.validate()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Mode != ModeMonolith || !rc.controller || !rc.node || rc.socketPath != "/tmp/x.sock" || rc.MaxVolumeSize != DefaultMaxVolumeSize {
		t.Errorf("defaults: mode %q controller %t node %t socket %q max volume size %d", rc.Mode, rc.controller, rc.node, rc.socketPath, rc.MaxVolumeSize)
	}
	ctrl := base
	ctrl.Mode, ctrl.NodeID = ModeController, ""
	if rc, err := ctrl.validate(); err != nil || rc.node || !rc.controller {
		t.Errorf("controller mode without node ID: %+v, %v", rc, err)
	}
	for ep, want := range map[string]string{"unix:///a/b.sock": "/a/b.sock", "unix:/a/b.sock": "/a/b.sock", "/a/b.sock": "/a/b.sock"} {
		if got, err := socketPath(ep); err != nil || got != want {
			t.Errorf("socketPath(%q) = %q, %v; want %q", ep, got, err, want)
		}
	}
}
