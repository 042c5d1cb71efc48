package containerdtest

import (
	"context"
	"os"
	"testing"

	"berth.dev/berth/internal/testutil"
)

// Address is the containerd socket a test uses: EnvAddress's when set, else
// that of a private daemon started for this test and stopped when it ends
// (its log is shown when the test failed). Where containerd cannot run
// (Unavailable) the test ends through testutil.Unavailable, with the
// reason; a daemon that could run but did not come up fails the test.
func Address(t testing.TB) string {
	t.Helper()
	if a := os.Getenv(EnvAddress); a != "" {
		return a
	}
	return address(t, func() (*Daemon, error) { return Start(context.Background(), "") })
}

func address(t testing.TB, start func() (*Daemon, error)) string {
	t.Helper()
	d, err := start()
	if err != nil {
		if Unavailable(err) {
			testutil.Unavailable(t, "no containerd for the test (%s unset, and a private one cannot run here): %v", EnvAddress, err)
			return ""
		}
		t.Fatalf("a private containerd did not start (%s unset): %v", EnvAddress, err)
		return ""
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("private containerd at %s: %s", d.Address, d.tail())
		}
		if err := d.Stop(); err != nil {
			t.Errorf("stopping the private containerd: %v", err)
		}
	})
	return d.Address
}
