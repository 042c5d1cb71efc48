package cli

import (
	"strings"
	"testing"
)

// TestIDArgumentNotUTF8NamesTheArgument: an ID or prefix argument that is
// not UTF-8 (`berth job status $'\xff'`) is an error naming the argument
// and what it should be. Before, the lookup sent it as the list's
// next_token and the agent's refusal, rightly a 400, named next_token, a
// parameter the user never typed.
func TestIDArgumentNotUTF8NamesTheArgument(t *testing.T) {
	a := startAgent(t)
	t.Setenv("BERTH_ADDR", "http://"+a.HTTPAddr())
	for _, tc := range []struct {
		kind string
		args []string
	}{
		{"job", []string{"job", "status", "web\xff"}},
		{"job", []string{"job", "stop", "\xff"}},
		{"alloc", []string{"alloc", "status", "\xff"}},
		{"alloc", []string{"alloc", "logs", "\xff"}},
		{"node", []string{"node", "status", "\xff"}},
		{"node", []string{"node", "drain", "-enable", "\xff"}},
		{"evaluation", []string{"eval", "status", "\xff"}},
		{"plugin", []string{"plugin", "status", "\xff"}},
		{"volume", []string{"volume", "status", "\xff"}},
		{"node", []string{"volume", "status", "-node", "\xff"}},
		{"claim", []string{"volume", "release", "\xff"}},
	} {
		code, out, errOut := berth(t, tc.args...)
		if code != exitError || out != "" || strings.Contains(errOut, "next_token") ||
			!strings.Contains(errOut, "is not valid UTF-8") || !strings.Contains(errOut, tc.kind) {
			t.Errorf("berth %q: exit %d, stdout %q, stderr %q; want exit %d naming the %s argument as not valid UTF-8",
				tc.args, code, out, errOut, exitError, tc.kind)
		}
	}
}
