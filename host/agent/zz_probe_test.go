package agent

import "testing"

func TestProbe(t *testing.T) {
	for _, src := range []struct{ f, s string }{
		{"agent.json", `[{"name": "a"}, {"log_level": "debug"}]`},
		{"agent.json", `{"name": `},
		{"agent.json", `{"plugin": {"a": [{"config": {"x": 1}}, {"config": {}}]}}`},
		{"agent.json", `{"server": [{"enabled": true}, {"enabled": false}]}`},
		{"agent.hcl", "plugin \"\" {}\n"},
		{"agent.hcl", "plugin \"a\" \"b\" {}\n"},
		{"agent.hcl", ""},
		{"agent.json", ""},
		{"agent.hcl", "server {\n  enabled = true\n  enabled = false\n}\n"},
	} {
		c, err := ParseConfig(src.f, []byte(src.s))
		t.Logf("%q\n%v\n%+v", src.s, err, c)
	}
}
