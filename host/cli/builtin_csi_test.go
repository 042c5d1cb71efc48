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
		code      int
	}{
		// What the command line checks is a usage error; what the plugin's
		// configuration refuses, an error.
		{"no endpoint", "", []string{"--state-dir", state, "--node-id", "n1"}, "--endpoint is required", exitUsage},
		{"no state dir", "", []string{"--endpoint", sock, "--node-id", "n1"}, "--state-dir is required", exitUsage},
		{"bad capacity, endpoint from CSI_ENDPOINT", "unix://" + sock, []string{"--state-dir", state, "--node-id", "n1", "--capacity", "12 bananas"}, "--capacity", exitUsage},
		{"bad topology", "", []string{"--endpoint", sock, "--state-dir", state, "--node-id", "n1", "--topology", "zone"}, "--topology", exitUsage},
		{"bad mode", "", []string{"--endpoint", sock, "--state-dir", state, "--node-id", "n1", "--mode", "all"}, "Mode", exitError},
		{"no node id", "", []string{"--endpoint", sock, "--state-dir", state}, "NodeID", exitError},
		{"tcp endpoint", "", []string{"--endpoint", "tcp://127.0.0.1:9", "--state-dir", state, "--node-id", "n1"}, "only unix sockets", exitError},
		{"bad log level", "", []string{"--endpoint", sock, "--state-dir", state, "--node-id", "n1", "--log-level", "loud"}, "--log-level", exitUsage},
	}
	for _, tc := range cases {
		code, stderr := run1(tc.env, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d mentioning %q", tc.name, code, stderr, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("a refused start left the socket behind: %v", err)
	}
}
