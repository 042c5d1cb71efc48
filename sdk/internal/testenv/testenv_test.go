package testenv

import (
	"fmt"
	"strings"
	"testing"
)

type outcome struct{ skipped, failed string }

func (o *outcome) Helper()           {}
func (o *outcome) Skip(args ...any)  { o.skipped = fmt.Sprint(args...) }
func (o *outcome) Fatal(args ...any) { o.failed = fmt.Sprint(args...) }

var _ skipFataler = (*outcome)(nil)

func TestUnavailable(t *testing.T) {
	var local, ci outcome
	unavailable(&local, false, "no /dev/full")
	unavailable(&ci, true, "no /dev/full")
	if local.failed != "" || !strings.Contains(local.skipped, "no /dev/full") {
		t.Errorf("outside CI: skipped %q, failed %q; want a skip with the reason", local.skipped, local.failed)
	}
	if ci.skipped != "" || !strings.Contains(ci.failed, "no /dev/full") || !strings.Contains(ci.failed, "CI=true") {
		t.Errorf("under CI: skipped %q, failed %q; want a failure with the reason", ci.skipped, ci.failed)
	}
}

func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{"": false, "true": true, "1": true, "false": false, "yes": false} {
		t.Setenv("CI", v)
		if got := InCI(); got != want {
			t.Errorf("CI=%q: InCI() = %v, want %v", v, got, want)
		}
	}
}
