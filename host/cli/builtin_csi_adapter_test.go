package cli

import (
	"bytes"
	"strings"
	"testing"

	"berth.dev/berth/sdk"
)

// TestBuiltinCSIAdapterRefusals: `berth builtin csi-adapter` explains
// itself when run wrongly. Serving for real is covered by csiadapters'
// tests, which run the same adapters.Serve in a subprocess.
func TestBuiltinCSIAdapterRefusals(t *testing.T) {
	t.Setenv(sdk.StorageHandshake.MagicCookieKey, "")
	cases := []struct {
		args []string
		want string
		code int
	}{
		{nil, "want one adapter name (hostpath), got 0", exitUsage},
		{[]string{"ceph"}, `unknown built-in storage adapter "ceph" (built in: hostpath)`, exitError},
		{[]string{"hostpath"}, "run by the berth agent", exitError},
	}
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		code := run(append([]string{"berth", "builtin", "csi-adapter"}, tc.args...), &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("builtin csi-adapter %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
}
