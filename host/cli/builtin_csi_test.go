package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCSIHostpathFlagErrors(t *testing.T) {
	t.Setenv("CSI_ENDPOINT", "")
	os.Unsetenv("CSI_ENDPOINT")
	state := t.TempDir()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	run1 := func(env string, args ...string) (int, string) {
		t.Helper()
		if env != "" {
			t.Setenv("CSI_ENDPOINT", env)
		}
		var out, errOut bytes.Buffer
		code := run(append([]string{"berth", "builtin", "csi-hostpath"}, args...), &out, &errOut)
		return code, errOut.String()
	}
	cases := []struct {
		name, env string
		args      []string
		want      string
	}{
		{"no endpoint", "", []string{"--state-dir", state, "--node-id", "n1"}, "endpoint"},
		{"bad capacity, endpoint from CSI_ENDPOINT", "unix://" + sock, []string{"--state-dir", state, "--node-id", "n1", "--capacity", "12 bananas"}, "--capacity"},
		{"bad topology", "", []string{"--endpoint", sock, "--state-dir", state, "--node-id", "n1", "--topology", "zone"}, "--topology"},
		{"bad mode", "", []string{"--endpoint", sock, "--state-dir", state, "--node-id", "n1", "--mode", "all"}, "Mode"},
		{"no node id", "", []string{"--endpoint", sock, "--state-dir", state}, "NodeID"},
		{"tcp endpoint", "", []string{"--endpoint", "tcp://127.0.0.1:9", "--state-dir", state, "--node-id", "n1"}, "only unix sockets"},
		{"bad log level", "", []string{"--endpoint", sock, "--state-dir", state, "--node-id", "n1", "--log-level", "loud"}, "--log-level"},
	}
	for _, tc := range cases {
		code, stderr := run1(tc.env, tc.args...)
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 mentioning %q", tc.name, code, stderr, tc.want)
		}
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("a refused start left the socket behind: %v", err)
	}
}
