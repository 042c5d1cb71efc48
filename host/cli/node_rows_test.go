package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// The node table reads rows (api.NodeRow), not messages: the words a
// newer agent writes for a status this CLI does not know are shown as
// written, and its fields this version lacks are skipped, where decoding
// into a pb.Node refused the answer ("unknown value") and the operator of
// a mixed-version cluster saw no table at all.
func TestNodeStatusTableShowsANewerAgentsWords(t *testing.T) {
	const id = "5d0f0000-0000-4000-8000-000000000000"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/nodes" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `[{"id": %q, "name": "c1", "status": "quarantined", "eligibility": "eligible", "drain": null,
			"a_field_from_the_future": {"x": 1}, "drivers": {"exec": {"healthy": true, "new": 1}}, "http_addr": "10.0.0.1:7646",
			"fingerprint": {"berth_version": "0.2.0"}}]`, id)
	}))
	defer srv.Close()
	out := wantOut(t, []string{"node", "status", "-address", srv.URL}, 0)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("node status printed:\n%s", out)
	}
	want := []string{"5d0f0000", "c1", "quarantined", "eligible", "false", "exec", "10.0.0.1:7646", "0.2.0"}
	if got := strings.Fields(lines[1]); !slices.Equal(got, want) {
		t.Fatalf("row %q, want %q", got, want)
	}
}
