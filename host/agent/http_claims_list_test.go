package agent

import (
	"net/http"
	"slices"
	"testing"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// TestClaimListOfEveryVolume: GET /v1/volumes/claims asks the servers for
// every volume's claims (no volume_id) from ?next_token= on, and answers
// them as one JSON list with the read's index. Before, there was no such
// route (404), so a claim could only be named by its full ID.
func TestClaimListOfEveryVolume(t *testing.T) {
	f := newFakeServers(t)
	data, logs := claimedView("data", "ebs", "n1"), claimedView("logs", "ebs", "n1")
	data.Claims[0].Id, data.Claims[1].Id = "c0ffee01", "beef0001"
	logs.Claims[0].Id, logs.Claims[1].Id = "c0ffee02", "d00d0001"
	f.volumes.put(data)
	f.volumes.put(logs)

	r := call(t, f.url, "GET", "/v1/volumes/claims?next_token=c0ff", "")
	claims, err := apijson.UnmarshalList(r.body, func() *pb.Claim { return &pb.Claim{} })
	if r.status != http.StatusOK || err != nil {
		t.Fatalf("claims: %d %s %v", r.status, r.body, err)
	}
	var got []string
	for _, c := range claims {
		got = append(got, c.GetId()+"@"+c.GetVolumeId())
	}
	if want := []string{"c0ffee01@data", "c0ffee02@logs", "d00d0001@logs"}; !slices.Equal(got, want) {
		t.Fatalf("claims from c0ff: %q, want %q", got, want)
	}
	if r.header.Get(HeaderIndex) == "" {
		t.Fatalf("no %s header: %v", HeaderIndex, r.header)
	}
	reqs := f.state.requests("Volumes.Claims")
	if q := reqs[len(reqs)-1].(*pb.VolumeClaimsRequest); q.GetVolumeId() != "" || q.GetQuery().GetNextToken() != "c0ff" {
		t.Fatalf("asked the servers for %v, want every volume's claims from c0ff", q)
	}
	if r := call(t, f.url, "POST", "/v1/volumes/claims", ""); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d %s, want 405", r.status, r.body)
	}
}
