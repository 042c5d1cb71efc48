package ui

import (
	"net/http"
	"strings"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// TestOverviewListsReadyClaimsWithAnError: a claim stuck in ready with its
// last error (an operator claim whose NodePublish fails, "left for the
// operator to release") is on the overview with its reason; a ready claim
// with no error is not, and with none failing the empty message does not
// claim every ready claim is fine.
func TestOverviewListsReadyClaimsWithAnError(t *testing.T) {
	const stuck, fine = "c1a10000-0000-4000-8000-00000000000a", "c1a10000-0000-4000-8000-00000000000b"
	f := fixtures()
	f.volumes[0].Claims = []*pb.Claim{
		{Id: stuck, VolumeId: "vol1", Operator: true, NodeId: nodeID, State: pb.ClaimState_CLAIM_STATE_READY, Attempts: 4,
			LastError: &pb.VolumeError{Message: "NodePublishVolume: mount: permission denied", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL}},
		{Id: fine, VolumeId: "vol1", AllocId: allocID, NodeId: nodeID, State: pb.ClaimState_CLAIM_STATE_READY},
	}
	_, h := newTestHandler(t, f)
	a := get(t, h, "/ui/")
	wantIn(t, "overview", a.body, `id="claim-`+stuck+`"`, "NodePublishVolume: mount: permission denied", "ready, failing</span> 1")
	wantNotIn(t, "overview", a.body, `id="claim-`+fine+`"`, "None:")

	f.volumes[0].Claims = f.volumes[0].Claims[1:]
	a = get(t, h, "/ui/")
	wantNotIn(t, "overview without a failing claim", a.body, `id="claim-`)
	if !strings.Contains(a.body, "ready with no error") {
		t.Errorf("overview without a stuck claim: empty message missing\n%s", a.body)
	}
}

// TestNodePageWithoutClaimsShowsTheNode: a token that may read the node
// but not list volume claims sees the node, its drivers, allocations and
// actions, with the claims section's 403 naming the capability.
func TestNodePageWithoutClaimsShowsTheNode(t *testing.T) {
	f := fixtures()
	f.deny["/v1/volumes/claims"] = "csi-list-volume"
	_, h := newTestHandler(t, f)
	a := get(t, h, "/ui/nodes/"+nodeID)
	if a.status != 200 {
		t.Fatalf("HTTP %d, want 200\n%s", a.status, a.body)
	}
	wantIn(t, "node page without csi-list-volume", a.body, `id="node-id">`+nodeID, "raw_exec", `data-action="drain-on"`, allocID[:8], "csi-list-volume", "Permission denied")
	wantNotIn(t, "node page without csi-list-volume", a.body, `id="node-claims"`)
}

// TestBasicAuthorizationIgnored: a UI behind a reverse proxy asking for
// HTTP Basic auth gets Authorization: Basic on every request; the page
// ignores it (the token is X-Berth-Token or a Bearer Authorization). A
// malformed Bearer is still refused.
func TestBasicAuthorizationIgnored(t *testing.T) {
	f := fixtures()
	f.deny["/v1/nodes"] = "node:read"
	f.token = secret1
	_, h := newTestHandler(t, f)
	for _, hdr := range []map[string]string{
		{"Authorization": "Basic b3BlcmF0b3I6cHc="},
		{"Authorization": "basic b3BlcmF0b3I6cHc=", "X-Berth-Token": secret1},
		{"Authorization": "Digest username=\"x\""},
	} {
		var kv []string
		for k, v := range hdr {
			kv = append(kv, k, v)
		}
		a := get(t, h, "/ui/nodes?fragment=main", kv...)
		want := http.StatusForbidden
		if hdr["X-Berth-Token"] != "" {
			want = http.StatusOK
		}
		if a.status != want {
			t.Errorf("%v: HTTP %d, want %d\n%s", hdr, a.status, want, a.body)
		}
	}
	if a := get(t, h, "/ui/nodes", "Authorization", "Bearer not-a-token"); a.status != http.StatusBadRequest {
		t.Errorf("a malformed Bearer: HTTP %d, want 400", a.status)
	}
}

// TestFragmentCarriesTitleAndTimes: the live fragment carries the page's
// title (a page first served as a 403 gets its real one) and every
// relative time its absolute <time datetime>.
func TestFragmentCarriesTitleAndTimes(t *testing.T) {
	_, h := newTestHandler(t, fixtures())
	a := get(t, h, "/ui/volumes/vol1?fragment=main")
	wantIn(t, "volume fragment", a.body, `id="live-title" data-title="Volume vol1 · berth"`,
		`<time datetime="2026-11-28T12:01:00Z" title="2026-11-28 12:01:00 UTC" data-rel>in 30s</time>`)
	wantNotIn(t, "volume fragment", a.body, "<title>")
}
