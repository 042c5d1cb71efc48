package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
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
