package containerdtest

import (
	"errors"
	"fmt"
	"testing"
)

// recorder is a testing.TB that records how the test would have ended.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
}
func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...) }
func (r *recorder) Skip(args ...any)  { r.skip = fmt.Sprint(args...) }

// A daemon that could run but did not come up (it crashed, a bad config)
// fails the test even outside CI; only a machine where containerd cannot
// run at all skips it.
func TestAddressFailsOnABrokenDaemonAndSkipsOnlyWhenUnavailable(t *testing.T) {
	t.Setenv("CI", "")
	broken := &recorder{TB: t}
	address(broken, func() (*Daemon, error) { return nil, errors.New("containerd exited: bad config") })
	if broken.fatal == "" || broken.skip != "" {
		t.Errorf("a daemon that did not start: fatal %q, skip %q; want the test failed", broken.fatal, broken.skip)
	}
	absent := &recorder{TB: t}
	address(absent, func() (*Daemon, error) { return nil, fmt.Errorf("%w: no containerd binary", errUnavailable) })
	if absent.skip == "" || absent.fatal != "" {
		t.Errorf("containerd unavailable: fatal %q, skip %q; want the test skipped", absent.fatal, absent.skip)
	}
}
