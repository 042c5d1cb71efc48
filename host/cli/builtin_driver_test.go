package cli

import (
	"bytes"
	"strings"
	"testing"

	"berth.dev/berth/sdk"
)

// TestBuiltinDriverRefusals: `berth builtin driver` explains itself when
// run wrongly. Serving for real is covered by the drivers' conformance
// tests, which run the same drivers.Serve in a subprocess.
func TestBuiltinDriverRefusals(t *testing.T) {
	t.Setenv(sdk.Handshake.MagicCookieKey, "")
	cases := []struct {
		args []string
		want string
		code int
	}{
		{nil, "want one driver name (exec, mock, raw_exec), got 0", exitUsage},
		{[]string{"docker"}, `unknown built-in driver "docker" (built in: exec, mock, raw_exec)`, exitError},
		{[]string{"raw_exec"}, "run by the berth agent", exitError},
	}
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		code := run(append([]string{"berth", "builtin", "driver"}, tc.args...), &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("builtin driver %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
}
