package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/rpc/pb"
)

// TestNodeLookupStopsOnATokenThatDoesNotAdvance runs `node status PREFIX`
// against a fake agent that answers every list request with the same page
// and the same X-Berth-NextToken, as the review's did: the lookup must stop
// with an error naming the endpoint and the token, not read forever.
func TestNodeLookupStopsOnATokenThatDoesNotAdvance(t *testing.T) {
	const id = "5d0f0000-0000-4000-8000-000000000000"
	const token = "5d0f0001-0000-4000-8000-000000000000"
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) > 100 {
			// Looping: answer with an error so the test ends rather than
			// hangs; the count below fails it.
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		if r.URL.Path != "/v1/nodes" {
			t.Errorf("unexpected request %s", r.URL)
		}
		w.Header().Set("X-Berth-NextToken", token)
		fmt.Fprintf(w, `[{"id": %q, "status": "ready"}]`, id)
	}))
	defer srv.Close()
	code, out, errOut := berth(t, "node", "status", "-address", srv.URL, "5d0f")
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	want := fmt.Sprintf("GET /v1/nodes answered next_token %q to a request with next_token %q", token, token)
	if !strings.Contains(errOut, want) {
		t.Fatalf("stderr %q does not say %s", errOut, want)
	}
	// The first token advances past the prefix; the second answer repeats it.
	if n := requests.Load(); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// TestNodeStatusShowsEligibilityAndDrain: the list has a column for each,
// and one node's view says whether it drains, since when and until when.
// Before, neither showed: an operator could not see why nothing was
// placed on a node.
func TestNodeStatusShowsEligibilityAndDrain(t *testing.T) {
	f := newFakeCluster(t)
	started := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	f.nodes[nodeA] = &pb.Node{Id: nodeA, Name: "client-1", Status: pb.NodeStatus_NODE_STATUS_READY,
		Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE}
	f.nodes[nodeB] = &pb.Node{Id: nodeB, Name: "client-2", Status: pb.NodeStatus_NODE_STATUS_READY,
		Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE,
		Drain: &pb.DrainStrategy{DeadlineMs: 3_600_000, IgnoreSystemJobs: true,
			StartedAt: started.UnixNano(), ForceDeadlineAt: started.Add(time.Hour).UnixNano()}}

	out := wantOut(t, []string{"node", "status", "-address", f.url}, 0)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := [][]string{
		{"ID", "Name", "Status", "Eligibility", "Drain", "Drivers", "Address", "Version"},
		{"n1n1n1n1", "client-1", "ready", "eligible", "false", "<none>"},
		{"n2n2n2n2", "client-2", "ready", "ineligible", "true", "<none>"},
	}
	if len(lines) != len(want) {
		t.Fatalf("node status printed %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); !slices.Equal(got, w) {
			t.Fatalf("line %d is %q, want %q", i, got, w)
		}
	}

	wantOut(t, []string{"node", "status", "-address", f.url, "n1"}, 0,
		"Eligibility         = eligible\n", "Drain               = false\n")
	wantOut(t, []string{"node", "status", "-address", f.url, "n2"}, 0,
		"Eligibility         = ineligible\n",
		"Drain               = true; since 2026-11-24T12:00:00Z, deadline 2026-11-24T13:00:00Z, system allocs stay\n")
	f.mu.Lock()
	f.nodes[nodeB].Drain = &pb.DrainStrategy{DeadlineMs: -1, StartedAt: started.UnixNano()}
	f.mu.Unlock()
	wantOut(t, []string{"node", "status", "-address", f.url, "n2"}, 0,
		"Drain               = true; since 2026-11-24T12:00:00Z, forced: allocs stop at once\n")
	// -json had both all along: the API's fields.
	wantOut(t, []string{"node", "status", "-address", f.url, "-json", "n2"}, 0, `"eligibility": "ineligible"`, `"deadline_ms": -1`)
}
