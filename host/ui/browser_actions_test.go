package ui

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"berth.dev/berth/rpc/pb"
)

// TestBrowserStopDraining: the node page of a draining node offers "Stop
// draining"; confirmed, the page sends the CLI's drain-off write (a JSON
// body with mark_eligible) as a same-origin request, which the agent's
// cross-origin protection (stood in for here by net/http's) lets through.
func TestBrowserStopDraining(t *testing.T) {
	f := fixtures()
	f.nodes[0].Drain = &pb.DrainStrategy{DeadlineMs: 3_600_000, StartedAt: time.Date(2026, 11, 28, 11, 0, 0, 0, time.UTC).UnixNano()}
	f.nodes[0].Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE
	_, h := newTestHandler(t, f)
	var mu sync.Mutex
	var got []string
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("PUT /v1/node/{id}/drain", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.PathValue("id")+" "+r.Header.Get("Content-Type")+" "+r.Header.Get("Sec-Fetch-Site")+" "+string(b))
		mu.Unlock()
		f.bump(func() {
			f.nodes[0].Drain = nil
			f.nodes[0].Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	})
	srv := httptest.NewServer(http.NewCrossOriginProtection().Handler(mux))
	t.Cleanup(srv.Close)
	ctx := startChromium(t)
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(c, chromedp.Navigate(srv.URL+"/ui/nodes/"+nodeID)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the Stop draining button", `document.querySelector('[data-action=drain-off]')`)
	if err := chromedp.Do(c, chromedp.Click(chromedp.CSS("[data-action=drain-off]"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the confirmation", `document.getElementById('confirm').open`)
	if err := chromedp.Do(c, chromedp.Click(chromedp.CSS("#confirm-ok"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the result", `document.getElementById('toast').textContent !== ''`)
	if toast, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('toast').textContent`)); toast != "Drain stopped." {
		t.Fatalf("toast %q, want Drain stopped.", toast)
	}
	waitJS(t, ctx, "the node no longer draining", `document.getElementById('node-drain').textContent === 'not draining' && document.querySelector('[data-action=drain-on]')`)
	mu.Lock()
	defer mu.Unlock()
	want := nodeID + " application/json same-origin " + `{"mark_eligible":true}`
	if len(got) != 1 || got[0] != want {
		t.Fatalf("drain writes %q, want [%q]", got, want)
	}
}
