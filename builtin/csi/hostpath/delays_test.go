package hostpath

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseDelays(t *testing.T) {
	got, err := ParseDelays([]string{"NodeStageVolume=3s", " ControllerPublishVolume = 1.5s ", "Probe=10m"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{"NodeStageVolume": 3 * time.Second, "ControllerPublishVolume": 1500 * time.Millisecond, "Probe": 10 * time.Minute}
	if len(got) != len(want) {
		t.Fatalf("ParseDelays = %v, want %v", got, want)
	}
	for m, d := range want {
		if got[m] != d {
			t.Errorf("delay of %s = %s, want %s", m, got[m], d)
		}
	}
	if got, err := ParseDelays(nil); err != nil || len(got) != 0 {
		t.Fatalf("ParseDelays(nil) = %v, %v; want an empty map", got, err)
	}

	bad := map[string]string{
		"NodeStageVolume":                      "want Method=duration",
		"NodeStageVolume=soon":                 "invalid duration",
		"NodeStage=3s":                         `unknown CSI method "NodeStage"`,
		"/csi.v1.Node/NodeStageVolume=3s":      "unknown CSI method",
		"nodestagevolume=3s":                   "unknown CSI method",
		"NodeStageVolume=0s":                   "want more than 0",
		"NodeStageVolume=-1s":                  "want more than 0",
		"NodeStageVolume=11m":                  "at most 10m0s",
		"=3s":                                  `unknown CSI method ""`,
		"NodePublishVolume=1s,NodeStageVolume": "unknown unit",
	}
	for in, msg := range bad {
		got, err := ParseDelays([]string{in})
		if err == nil {
			t.Errorf("ParseDelays(%q) = %v, want an error", in, got)
			continue
		}
		if !errors.Is(err, ErrBadDelay) {
			t.Errorf("ParseDelays(%q): error %v does not wrap ErrBadDelay", in, err)
		}
		if !strings.Contains(err.Error(), in) || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseDelays(%q) error %q: want the input quoted and %q", in, err, msg)
		}
	}
	if _, err := ParseDelays([]string{"NodeStageVolume=1s", "NodeStageVolume=2s"}); err == nil || !strings.Contains(err.Error(), "already has a delay") {
		t.Fatalf("a method given twice: %v, want an error", err)
	}
}

func TestConfigRejectsBadDelays(t *testing.T) {
	base := Config{Endpoint: "/tmp/csi.sock", StateDir: "/tmp/state", NodeID: "n1"}
	for name, tc := range map[string]struct {
		mut   func(*Config)
		field string
	}{
		"unknown method before": {func(c *Config) { c.DelayBefore = map[string]time.Duration{"Stage": time.Second} }, "DelayBefore"},
		"zero delay after":      {func(c *Config) { c.DelayAfter = map[string]time.Duration{"NodePublishVolume": 0} }, "DelayAfter"},
		"marker dir alone":      {func(c *Config) { c.DelayMarkerDir = "/tmp/markers" }, "DelayMarkerDir"},
	} {
		c := base
		tc.mut(&c)
		_, err := c.validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s: validate() = %v, want a ConfigError on %s", name, err, tc.field)
		}
		if tc.field != "DelayMarkerDir" && !errors.Is(err, ErrBadDelay) {
			t.Errorf("%s: %v does not wrap ErrBadDelay", name, err)
		}
	}
	c := base
	c.DelayAfter = map[string]time.Duration{"NodePublishVolume": time.Second}
	c.DelayMarkerDir = "markers"
	rc, err := c.validate()
	if err != nil {
		t.Fatalf("valid delays refused: %v", err)
	}
	if !strings.HasPrefix(rc.DelayMarkerDir, "/") || !strings.HasSuffix(rc.DelayMarkerDir, "/markers") {
		t.Fatalf("relative marker dir resolved to %q, want an absolute path", rc.DelayMarkerDir)
	}
}
