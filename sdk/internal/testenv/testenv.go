package testenv

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// InCI reports whether CI holds a true value (strconv.ParseBool), as CI
// systems and .ci/run set it.
func InCI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// skipFataler is the part of testing.TB Unavailable uses.
type skipFataler interface {
	Helper()
	Skip(args ...any)
	Fatal(args ...any)
}

// Unavailable skips t with the reason, or fails it under CI=true.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	unavailable(t, InCI(), fmt.Sprintf(format, args...))
}

func unavailable(t skipFataler, ci bool, reason string) {
	t.Helper()
	if ci {
		t.Fatal(reason + " (CI=true: tests that cannot run fail instead of skipping)")
		return
	}
	t.Skip("skipped: " + reason)
}
