package chaos

import (
	"path/filepath"
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestLastObservationExplainsAMissedFree is seed 3034 of the long suite in
// four operations: an operator claims o1 (single-node-writer) on c1, a
// read lists it, it is released, and a claim on c2 is granted, which the
// free of the first made room for. The observer's reads hung on a
// partitioned server, so no read saw the free: without a last observation
// the model still holds the first claim and calls the grant illegal; the
// last observation (observeLast) gives the free its "gone" and the history
// is linearizable. It needs no root and runs in every go test.
func TestLastObservationExplainsAMissedFree(t *testing.T) {
	const c1, c2 = "node-c1", "node-c2"
	h := newHistory()
	h.add(claimRecord{client: 1, kind: "claim", volume: "o1", id: "a", node: c1, write: true, call: 10, ret: 20})
	h.observed([]apiClaim{{ID: "a", VolumeID: "o1", NodeID: c1, Mode: "write", State: "ready", Operator: true}}, 25, 30)
	h.add(claimRecord{client: 1, kind: "release", volume: "o1", id: "a", call: 40, ret: 50})
	h.add(claimRecord{client: 1, kind: "claim", volume: "o1", id: "b", node: c2, call: 60, ret: 70})
	h.add(claimRecord{client: 1, kind: "release", volume: "o1", id: "b", call: 80, ret: 90})

	html := filepath.Join(t.TempDir(), "claims.html")
	if res, _ := checkLinearizable(h.records(), html); res != porcupine.Illegal {
		t.Fatalf("without the last observation: %s; want illegal (the model holds claim a)", res)
	}
	h.observed(nil, 100, 110)
	recs := h.records()
	gone := 0
	for _, r := range recs {
		if r.kind == "gone" {
			gone++
			if r.id == "a" && r.call != 25 {
				t.Errorf("gone a from %d; want 25, the last read that listed it", r.call)
			}
		}
	}
	if gone != 2 {
		t.Fatalf("%d gone operations; want 2 (a and b): %+v", gone, recs)
	}
	if res, err := checkLinearizable(recs, html); res != porcupine.Ok {
		t.Fatalf("with the last observation: %s (%v); want ok", res, err)
	}
}
