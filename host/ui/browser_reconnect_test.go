package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserDroppedConnectionShowsAndRecovers: the agent goes away (its
// connections dropped, new ones closed at once): the page says so in its
// banner. It comes back, restarted with fresh state (a lower index) and a
// change: the banner goes and the page shows the change, without waiting
// for the next change or the long poll's whole wait.
func TestBrowserDroppedConnectionShowsAndRecovers(t *testing.T) {
	f := fixtures()
	_, h := newTestHandler(t, f)
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			// A connection refused, as the browser sees it.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ctx := startChromium(t)
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(c, chromedp.Navigate(srv.URL+"/ui/nodes")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the live index", `document.getElementById('main').dataset.index === '10'`)
	down.Store(true)
	srv.CloseClientConnections()
	waitJS(t, ctx, "the banner", `!document.getElementById('banner').hidden && document.getElementById('banner').textContent.includes('Connection to the agent lost')`)

	// Restarted: fresh state, whose index is below the page's.
	f.mu.Lock()
	f.index = 3
	f.nodes[0].Name = "node-after-restart"
	f.mu.Unlock()
	down.Store(false)
	start := time.Now()
	waitJS(t, ctx, "the banner gone and the page current", `document.getElementById('banner').hidden && document.getElementById('live').textContent.includes('node-after-restart')`)
	t.Logf("recovered %s after the agent came back", time.Since(start).Round(time.Millisecond))
}
