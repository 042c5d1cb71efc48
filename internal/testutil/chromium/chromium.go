// Package chromium starts headless Chromium for the web UI's browser tests
// (host/ui's and acceptance's), with one set of flags, so a flag fix lands
// once.
package chromium

import (
	"context"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"

	"berth.dev/berth/internal/testutil"
)

// Path is where Debian's chromium package puts the browser; `make browser`
// installs it.
const Path = "/usr/bin/chromium"

// Start starts headless Chromium with a new empty profile and returns its
// first tab's context; the browser stops when the test ends. A machine
// without it skips the test (fails under CI=true). opts are further
// options of the tab's context (chromedp.WithLogf).
func Start(t *testing.T, opts ...chromedp.ContextOption) context.Context {
	t.Helper()
	if _, err := exec.LookPath(Path); err != nil {
		testutil.Unavailable(t, "needs Debian's chromium at %s (make browser installs it): %v", Path, err)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(Path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	ctx, cancel := chromedp.NewContext(allocCtx, opts...)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", Path, err)
	}
	return ctx
}
