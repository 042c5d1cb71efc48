package ui

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"berth.dev/berth/internal/testutil/chromium"
)

// TestBrowserLeavingAPageEndsItsLongPoll opens live pages one after
// another in headless Chromium (more than the six connections a browser
// keeps to one host): each page's blocking fragment request must end when
// the page is left, else a page kept in the back/forward cache holds its
// connection and the seventh page waits for one. The full browser test is
// acceptance's TestWebUIInABrowser.
func TestBrowserLeavingAPageEndsItsLongPoll(t *testing.T) {
	_, h := newTestHandler(t, fixtures())
	srv := httptest.NewServer(h)
	// After the browser stops (cleanups run last first): Close waits for
	// the requests in flight, and a page's long poll ends with its tab.
	t.Cleanup(srv.Close)
	ctx := startChromium(t)
	pages := []string{"/ui/", "/ui/jobs", "/ui/nodes", "/ui/plugins", "/ui/volumes", "/ui/volumes/vol1", "/ui/jobs/web", "/ui/nodes/" + nodeID, "/ui/plugins/hostpath", "/ui/"}
	for _, p := range pages {
		// Each page starts its long poll at once; a page left with it
		// pending would hold its connection for the fake's whole wait.
		pctx, c := context.WithTimeout(ctx, 15*time.Second)
		start := time.Now()
		err := chromedp.Do(pctx, chromedp.Navigate(srv.URL+p))
		c()
		if err != nil {
			t.Fatalf("opening %s after %d pages: %v (after %s)", p, len(pages), err, time.Since(start))
		}
		n, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('main').dataset.index`))
		if err != nil || n == "" {
			t.Fatalf("%s: no live index (%q, %v)", p, n, err)
		}
	}
}

// startChromium starts headless Chromium for the test
// (internal/testutil/chromium).
func startChromium(t *testing.T) context.Context { return chromium.Start(t) }

// TestBrowserTokenEnteredInThePage: with the API refusing the page's read,
// the page shows the 403 naming the capability; a token typed in the
// page's field (keyboard only) is kept in the tab's session storage and
// sent with the reads, and the page shows the data without a reload.
func TestBrowserTokenEnteredInThePage(t *testing.T) {
	f := fixtures()
	f.deny["/v1/volume/csi/{id}"] = "csi-read-volume"
	f.token = secret1
	_, h := newTestHandler(t, f)
	srv := httptest.NewServer(h)
	// After the browser stops (cleanups run last first): Close waits for
	// the requests in flight, and a page's long poll ends with its tab.
	t.Cleanup(srv.Close)
	ctx := startChromium(t)
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(c, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	run("open the volume page", chromedp.Navigate(srv.URL+"/ui/volumes/vol1"))
	if got := eval(`document.getElementById('live').textContent`); !strings.Contains(got, "csi-read-volume") || !strings.Contains(got, "Permission denied") {
		t.Fatalf("without a token the page shows %q, want the 403 naming csi-read-volume", got)
	}
	eval(`(window.__noReload = 'yes')`)
	run("type the token", chromedp.Focus(chromedp.CSS("#token-input")), chromedp.KeyEvent(secret1), chromedp.KeyEvent(kb.Enter))
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(c, chromedp.Evaluate[bool](`new Promise((resolve) => {
  const ok = () => !!document.getElementById('claim-`+claimID+`');
  if (ok()) { resolve(true); return; }
  const mo = new MutationObserver(() => { if (ok()) { mo.disconnect(); resolve(true); } });
  mo.observe(document, {subtree: true, childList: true});
})`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("the page never showed the volume's claims after the token: %v\n%s", err, eval(`document.getElementById('live').textContent`))
	}
	// The page's title follows the data (first served as a 403, it was
	// "Forbidden"); the relative times are the browser's, not frozen at
	// the render's "in 30s".
	if got := eval(`document.title`); got != "Volume vol1 · berth" {
		t.Errorf("title after the token %q, want %q", got, "Volume vol1 · berth")
	}
	if got := eval(`document.querySelector('#claim-` + claimID + ` time[datetime="2026-11-28T12:01:00Z"]').textContent`); got == "in 30s" || got == "" {
		t.Errorf("the next retry still reads %q: not refreshed from its datetime", got)
	}
	if eval(`window.__noReload`) != "yes" {
		t.Error("the page was reloaded")
	}
	if got := eval(`sessionStorage.getItem('berth-token')`); got != secret1 {
		t.Errorf("session storage holds %q", got)
	}
	if got := eval(`document.getElementById('token-input').value`); got != "" {
		t.Errorf("the token field still shows %q", got)
	}
}
