package pluginsup

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

// TestFamilyCarriesCodesAndNouns: every kind's family has the same codes,
// worded with its own nouns, and its sentinels are its own.
func TestFamilyCarriesCodesAndNouns(t *testing.T) {
	f := NewFamily(Nouns{One: "widget", Process: "widget plugin", Service: "widget service"})
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		f.Unknown:       codes.NotFound,
		f.Missing:       codes.NotFound,
		f.NotExecutable: codes.FailedPrecondition,
		f.InvalidConfig: codes.InvalidArgument,
		f.Start:         codes.Unavailable,
		f.Name:          codes.FailedPrecondition,
		f.Exited:        codes.Unavailable,
		f.Unavailable:   codes.Unavailable,
		f.Failed:        codes.FailedPrecondition,
		f.Shutdown:      codes.Unavailable,
		f.Nested:        codes.FailedPrecondition,
	})
	for err, want := range map[error]string{
		f.Unknown:     "unknown widget service",
		f.Missing:     "widget plugin not found",
		f.Unavailable: "widget service is not available",
		f.Shutdown:    "widget manager is shut down",
	} {
		if err.Error() != want {
			t.Errorf("%q, want %q", err, want)
		}
	}
	other := NewFamily(Nouns{One: "gadget", Process: "gadget plugin", Service: "gadget service"})
	if errors.Is(fmt.Errorf("x: %w", f.Missing), other.Missing) {
		t.Error("one kind's Missing is another kind's")
	}
	pe := f.Wrap(Entry[[]byte]{Name: "w1", Path: "/p/w1", Source: "agent.hcl:3"}, f.Missing)
	if got, want := pe.Error(), `widget "w1" (/p/w1), configured at agent.hcl:3: widget plugin not found`; got != want || !errors.Is(pe, f.Missing) {
		t.Errorf("PluginError %q, want %q wrapping Missing", got, want)
	}
}
