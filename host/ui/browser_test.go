package ui

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"berth.dev/berth/internal/testutil"
)

// TestBrowserLeavingAPageEndsItsLongPoll opens live pages one after
// another in headless Chromium (more than the six connections a browser
// keeps to one host): each page's blocking fragment request must end when
// the page is left, else a page kept in the back/forward cache holds its
// connection and the seventh page waits for one. The full browser test is
// acceptance's TestWebUIInABrowser.
func TestBrowserLeavingAPageEndsItsLongPoll(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	if _, err := exec.LookPath(chromium); err != nil {
		testutil.Unavailable(t, "needs Debian's chromium at %s (make browser installs it): %v", chromium, err)
	}
	_, h := newTestHandler(t, fixtures())
	srv := httptest.NewServer(h)
	defer srv.Close()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()))
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
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
