package agent

import (
	"testing"

	"berth.dev/berth/csi/adapters"
)

// TestAdapterKindsKeepTheirWords: every adapter event kind reaches the
// plugin manager as the kind of the same word, which starts the reason it
// reports for an unhealthy adapter.
func TestAdapterKindsKeepTheirWords(t *testing.T) {
	for k := adapters.EventStarted; k <= adapters.EventStartFailed; k++ {
		got, ok := adapterKinds[k]
		if !ok || got.String() != k.String() {
			t.Errorf("adapter event %v reaches the plugin manager as %v (mapped: %v)", k, got, ok)
		}
	}
}
