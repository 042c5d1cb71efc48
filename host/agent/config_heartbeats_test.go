package agent

import (
	"errors"
	"strings"
	"testing"
)

func TestConfigMaxHeartbeatsPerSecond(t *testing.T) {
	c, err := ParseConfig("agent.hcl", []byte("server {\n  max_heartbeats_per_second = 20\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Server.MaxHeartbeatsPerSecond; got != 20 {
		t.Errorf("max_heartbeats_per_second = %d, want 20", got)
	}
	_, err = ParseConfig("agent.hcl", []byte("server {\n  max_heartbeats_per_second = -1\n}\n"))
	if err == nil || !errors.Is(err, ErrInvalidValue) || !strings.Contains(err.Error(), "agent.hcl:2:") ||
		!strings.Contains(err.Error(), "server.max_heartbeats_per_second") {
		t.Errorf("a negative rate: %v", err)
	}
}
