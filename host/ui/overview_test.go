package ui

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestOverviewReadsAtOnce holds each of the overview's reads (servers,
// nodes, jobs, plugins, claims) until every one has arrived: made one
// after another, the first would wait for the others forever (cut here
// at 2 s, and the test fails); made at once, the page takes its slowest
// read, not their sum (on the bench's large state, counting the nodes).
func TestOverviewReadsAtOnce(t *testing.T) {
	f := fixtures()
	reads := map[string]bool{"/v1/operator/raft/configuration": true, "/v1/nodes": true, "/v1/jobs": true, "/v1/plugins": true, "/v1/volumes/claims": true}
	var mu sync.Mutex
	seen := map[string]bool{}
	all := make(chan struct{})
	var release sync.Once
	timedOut := false
	api := f.handler()
	held := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The watched reads (one item) are made before the page's reads.
		if reads[r.URL.Path] && r.URL.Query().Get("per_page") != "1" {
			mu.Lock()
			if !seen[r.URL.Path] {
				seen[r.URL.Path] = true
				if len(seen) == len(reads) {
					release.Do(func() { close(all) })
				}
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(2 * time.Second):
				mu.Lock()
				timedOut = true
				mu.Unlock()
				release.Do(func() { close(all) })
			}
		}
		api.ServeHTTP(w, r)
	})
	h, err := New(held, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range h.Routes() {
		mux.HandleFunc("GET "+r.Pattern, r.Serve)
	}
	a := get(t, mux, "/ui/")
	if a.status != http.StatusOK {
		t.Fatalf("HTTP %d\n%s", a.status, a.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if timedOut {
		t.Errorf("the overview's reads were not all in flight at once: %d of %d arrived before the first was answered (%v)", len(seen), len(reads), seen)
	}
	wantIn(t, "/ui/", a.body, "server-1", `id="nodes-total">1 `, "hostpath", "releasing")
}
