package agent

import (
	"errors"
	"testing"
)

func TestConfigNodeIdentityEnforcement(t *testing.T) {
	if got := DefaultConfig().Server.NodeIdentityEnforcement; got != "warn" {
		t.Errorf("default node_identity_enforcement = %q, want warn", got)
	}
	for _, v := range []string{"warn", "strict"} {
		c, err := ParseConfig("agent.hcl", []byte("server {\n  node_identity_enforcement = \""+v+"\"\n}\n"))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if got := c.Server.NodeIdentityEnforcement; got != v {
			t.Errorf("node_identity_enforcement = %q, want %q", got, v)
		}
	}
	_, err := ParseConfig("agent.hcl", []byte("server {\n  node_identity_enforcement = \"loose\"\n}\n"))
	const want = `agent.hcl:2:31: server.node_identity_enforcement: "loose" is not a node identity enforcement (want "warn" or "strict")`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant   %s", err, want)
	}
	if !errors.Is(err, ErrInvalidValue) {
		t.Errorf("error %v is not ErrInvalidValue", err)
	}
}
