package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"berth.dev/berth/rpc/pb"
)

// TestLiveFragmentWaitsForAChange: a fragment request with the page's
// index blocks on the page's reads until the state changes, then answers
// the page as it is now with the new index; nothing answers before.
func TestLiveFragmentWaitsForAChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fixtures()
		_, h := newTestHandler(t, f)
		first := get(t, h, "/ui/volumes/vol1?fragment=main")
		index := first.header.Get("X-Berth-Index")
		if index != "10" || !strings.Contains(first.body, `id="claim-`+claimID+`"`) {
			t.Fatalf("first render: index %q\n%s", index, first.body)
		}
		done := make(chan answer, 1)
		go func() { done <- get(t, h, "/ui/volumes/vol1?fragment=main&index="+index) }()
		synctest.Wait()
		select {
		case a := <-done:
			t.Fatalf("answered before any change: HTTP %d\n%s", a.status, a.body)
		default:
		}
		// The claim is freed: its row goes.
		f.bump(func() { f.volumes[0].Claims = f.volumes[0].Claims[1:] })
		synctest.Wait()
		a := <-done
		if a.status != http.StatusOK || a.header.Get("X-Berth-Index") != "11" {
			t.Fatalf("after the change: HTTP %d, index %q", a.status, a.header.Get("X-Berth-Index"))
		}
		wantNotIn(t, "after the change", a.body, claimID, "<html")
		wantIn(t, "after the change", a.body, opClaim)
	})
}

// TestLiveOverviewWakesOnAnyWatchedRead: the overview waits on nodes,
// jobs, plugins and claims, each from its own index; a change to one
// answers, and the indexes of the others are kept.
func TestLiveOverviewWakesOnAnyWatchedRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fixtures()
		_, h := newTestHandler(t, f)
		done := make(chan answer, 1)
		go func() { done <- get(t, h, "/ui/?fragment=main&index=10.10.10.10") }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("answered before any change")
		default:
		}
		f.bump(func() { f.nodes[0].Status = pb.NodeStatus_NODE_STATUS_DOWN })
		synctest.Wait()
		a := <-done
		wantIn(t, "overview after a node went down", a.body, `<span class="state bad">down</span> 1`)
		idx := strings.Split(a.header.Get("X-Berth-Index"), ".")
		if len(idx) != 4 || !strings.Contains(a.header.Get("X-Berth-Index"), "11") {
			t.Fatalf("index %q: want four, one of them 11", a.header.Get("X-Berth-Index"))
		}
	})
}

// TestLiveBadIndexRendersAtOnce: an index of the wrong shape (another
// page's, or made up) does not block: the page answers with its own.
func TestLiveBadIndexRendersAtOnce(t *testing.T) {
	_, h := newTestHandler(t, fixtures())
	for _, idx := range []string{"1.2", "x", "-1", "1..2.3"} {
		a := get(t, h, "/ui/?fragment=main&index="+idx)
		if a.status != http.StatusOK || a.header.Get("X-Berth-Index") != "10.10.10.10" {
			t.Errorf("index %q: HTTP %d, index %q", idx, a.status, a.header.Get("X-Berth-Index"))
		}
	}
}

// TestLiveCallerGoneEndsTheWait: the reads a live request waits on end
// with it, and nothing is written.
func TestLiveCallerGoneEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fixtures()
		_, h := newTestHandler(t, f)
		ctx, cancel := context.WithCancel(context.Background())
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/ui/volumes/vol1?fragment=main&index=10", nil)
			h.ServeHTTP(rec, req)
		}()
		synctest.Wait()
		before := f.callsOf("/v1/volume/csi/{id}")
		cancel()
		<-done
		if rec.Body.Len() != 0 {
			t.Errorf("wrote %q to a caller that went away", rec.Body.String())
		}
		if f.callsOf("/v1/volume/csi/{id}") != before {
			t.Error("read the page for a caller that went away")
		}
	})
}

// FuzzParseIndex: the index a fragment request echoes is the caller's
// input; any text is either refused (the page answers at once) or read
// as one index per watched read that formats back to itself.
func FuzzParseIndex(f *testing.F) {
	for _, s := range []string{"", "1", "10.10.10.10", "1..2", "-1", "18446744073709551615.0", "1.2.3.4.5"} {
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = n % 8
		idx, ok := parseIndex(s, n)
		if !ok {
			return
		}
		if len(idx) != n {
			t.Fatalf("parseIndex(%q, %d) = %v", s, n, idx)
		}
		if back, ok := parseIndex(formatIndex(idx), n); !ok || formatIndex(back) != formatIndex(idx) {
			t.Fatalf("%q: %v does not round-trip", s, idx)
		}
	})
}

// TestLiveOverviewWithARefusedPartWaits: a token that may not list jobs
// sees the overview with the jobs part's error; a live request of it
// waits for a change of the other parts instead of answering at once (a
// refused read answers at once, and the script would ask again in a tight
// loop). With every part refused it answers after the whole wait.
func TestLiveOverviewWithARefusedPartWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fixtures()
		f.deny["/v1/jobs"] = "list-jobs"
		_, h := newTestHandler(t, f)
		first := get(t, h, "/ui/?fragment=main")
		index := first.header.Get("X-Berth-Index")
		wantIn(t, "overview without list-jobs", first.body, "list-jobs")
		done := make(chan answer, 1)
		go func() { done <- get(t, h, "/ui/?fragment=main&index="+index) }()
		synctest.Wait()
		select {
		case a := <-done:
			t.Fatalf("answered before any change (index %q): HTTP %d", index, a.status)
		default:
		}
		before := f.callsOf("/v1/nodes")
		f.bump(func() { f.nodes[0].Status = pb.NodeStatus_NODE_STATUS_DOWN })
		synctest.Wait()
		a := <-done
		wantIn(t, "overview after a node went down", a.body, `<span class="state bad">down</span> 1`)
		if n := f.callsOf("/v1/nodes") - before; n > 3 {
			t.Errorf("%d node reads for one change, want at most 3", n)
		}

		f.mu.Lock()
		for _, p := range []string{"/v1/nodes", "/v1/plugins", "/v1/volumes/claims"} {
			f.deny[p] = "some-capability"
		}
		f.mu.Unlock()
		start := time.Now()
		a = get(t, h, "/ui/?fragment=main&index="+a.header.Get("X-Berth-Index"))
		if waited := time.Since(start); waited < DefaultWait {
			t.Errorf("every part refused: answered after %s, want the whole wait (%s)", waited, DefaultWait)
		}
		if a.status != http.StatusOK {
			t.Errorf("every part refused: HTTP %d", a.status)
		}
	})
}

// TestLiveTabsShareOneLoad: two tabs on a page with one token wake on the
// same change and read the page once between them (the overview reads
// every node and job; the fake's one index for every table would wake its
// four watches at once, so the nodes page stands in).
func TestLiveTabsShareOneLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fixtures()
		_, h := newTestHandler(t, f)
		done := make(chan answer, 2)
		for range 2 {
			go func() { done <- get(t, h, "/ui/nodes?fragment=main&index=10") }()
		}
		synctest.Wait()
		f.mu.Lock()
		f.hold = make(chan struct{})
		before := f.calls["/v1/nodes"]
		f.mu.Unlock()
		f.bump(func() { f.nodes[0].Status = pb.NodeStatus_NODE_STATUS_DOWN })
		synctest.Wait() // both woke; one load is held reading the nodes
		f.mu.Lock()
		close(f.hold)
		f.hold = nil
		f.mu.Unlock()
		for range 2 {
			a := <-done
			wantIn(t, "a tab after the change", a.body, `<span class="state bad">down</span>`)
		}
		// The tabs' watch reads were made before the change: what is
		// read after it is the page's load, once.
		if n := f.callsOf("/v1/nodes") - before; n != 1 {
			t.Errorf("%d loads of the node list for two tabs and one change, want 1", n)
		}
	})
}
