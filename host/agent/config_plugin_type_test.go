package agent

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// A plugin block's type says whether it configures a task driver (the
// default) or a CSI storage adapter, in HCL and in JSON alike.
func TestParseConfigPluginType(t *testing.T) {
	hclSrc := `
plugin "hostpath" {
  type = "csi"
  config {
    capacity = "10GiB"
  }
}
plugin "raw_exec" {
  type = "driver"
}
plugin "docker" {}
`
	jsonSrc := `{"plugin": {
  "hostpath": {"type": "csi", "config": {"capacity": "10GiB"}},
  "raw_exec": {"type": "driver"},
  "docker": {}
}}`
	for file, src := range map[string]string{"a.hcl": hclSrc, "a.json": jsonSrc} {
		c, err := ParseConfig(file, []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		hp := c.Plugins["hostpath"]
		if hp == nil || hp.Type != PluginTypeCSI || !hp.IsCSI() || !reflect.DeepEqual(hp.Config, map[string]any{"capacity": "10GiB"}) {
			t.Errorf("%s: hostpath = %+v", file, hp)
		}
		if p := c.Plugins["raw_exec"]; p == nil || p.Type != PluginTypeDriver || p.IsCSI() {
			t.Errorf("%s: raw_exec = %+v", file, p)
		}
		if p := c.Plugins["docker"]; p == nil || p.Type != "" || p.IsCSI() {
			t.Errorf("%s: docker = %+v (no type is a driver)", file, p)
		}
	}
}

// A bad type is refused naming the file, line and column, the key and the
// types there are.
func TestParseConfigPluginTypeErrors(t *testing.T) {
	cases := []struct {
		src      string
		sentinel error
		want     string
	}{
		{"plugin \"hostpath\" {\n  type = \"volume\"\n}\n", ErrInvalidValue,
			`a.hcl:2:10: plugin.hostpath.type: plugin type "volume": want "driver" (a task driver, the default) or "csi" (a CSI storage adapter)`},
		{"plugin \"hostpath\" {\n  type = 3\n}\n", ErrWrongType, "a.hcl:2:10: plugin.hostpath.type: string required, got number"},
		{"plugin \"hostpath\" {\n  tpye = \"csi\"\n}\n", ErrUnknownKey, `a.hcl:2:3: unknown key "tpye" in plugin "hostpath" block (did you mean "type"?)`},
	}
	for _, tc := range cases {
		_, err := ParseConfig("a.hcl", []byte(tc.src))
		if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %v containing %q", tc.src, err, tc.sentinel, tc.want)
		}
	}
}

// A later file may set or change a plugin's type; one that does not keeps it.
func TestMergePluginType(t *testing.T) {
	base := mustParse(t, "a.hcl", "plugin \"hostpath\" {\n  type = \"csi\"\n}\n")
	over := mustParse(t, "b.hcl", "plugin \"hostpath\" {\n  config {\n    capacity = \"1GiB\"\n  }\n}\n")
	m := base.Merge(over)
	if p := m.Plugins["hostpath"]; p.Type != PluginTypeCSI || p.Config["capacity"] != "1GiB" {
		t.Errorf("merged = %+v", p)
	}
}
