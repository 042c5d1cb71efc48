package pluginsup

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

// TestSentinelsCarryTheirCodes pins the code each of the plugin managers'
// sentinels reaches a gRPC or HTTP caller with.
func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrStarted:       codes.FailedPrecondition,
		ErrCatalog:       codes.InvalidArgument,
		ErrUnknown:       codes.NotFound,
		ErrMissing:       codes.NotFound,
		ErrNotExecutable: codes.FailedPrecondition,
		ErrInvalidConfig: codes.InvalidArgument,
		ErrStart:         codes.Unavailable,
		ErrName:          codes.FailedPrecondition,
		ErrExited:        codes.Unavailable,
		ErrUnavailable:   codes.Unavailable,
		ErrFailed:        codes.FailedPrecondition,
		ErrShutdown:      codes.Unavailable,
		ErrNested:        codes.FailedPrecondition,
	})
}

// TestNounNamesThePlugin: a kind's errors name its plugin with its noun
// and still are the shared sentinels.
func TestNounNamesThePlugin(t *testing.T) {
	const n Noun = "widget"
	pe := n.Wrap(Entry[[]byte]{Name: "w1", Path: "/p/w1", Source: "agent.hcl:3"}, ErrMissing)
	if got, want := pe.Error(), `widget "w1" (/p/w1), configured at agent.hcl:3: plugin not found`; got != want || !errors.Is(pe, ErrMissing) {
		t.Errorf("PluginError %q, want %q wrapping ErrMissing", got, want)
	}
	if err := n.Unknown("w2"); err.Error() != `widget "w2": unknown plugin` || !errors.Is(err, ErrUnknown) {
		t.Errorf("Unknown: %v", err)
	}
}
