package containerdtest

import (
	"context"
	"os"
	"testing"

	"berth.dev/berth/internal/testutil"
)

// Address is the containerd socket a test uses: EnvAddress's when set, else
// that of a private daemon started for this test and stopped when it ends
// (its log is shown when the test failed). Where containerd cannot run the
// test ends through testutil.Unavailable, with the reason.
func Address(t testing.TB) string {
	t.Helper()
	if a := os.Getenv(EnvAddress); a != "" {
		return a
	}
	d, err := Start(context.Background(), "")
	if err != nil {
		testutil.Unavailable(t, "no containerd for the test (%s unset, and a private one did not start): %v", EnvAddress, err)
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
