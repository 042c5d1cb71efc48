package acceptance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"berth.dev/berth/internal/testutil/chromium"
)

// browser is a headless Chromium the test started, with what its pages
// wrote to the console and the browser's log.
type browser struct {
	ctx context.Context
	mu  sync.Mutex
	// problems are console errors, exceptions and log entries of level
	// error or of source security (a CSP violation is one).
	problems []string
}

// startBrowser starts headless Chromium with a new empty profile; the
// browser stops when the test ends. A machine without it skips the test
// (fails under CI=true).
func startBrowser(t *testing.T) *browser {
	t.Helper()
	ctx := chromium.Start(t, chromedp.WithLogf(t.Logf))
	b := &browser{ctx: ctx}
	b.watch(ctx)
	return b
}

// tab opens another tab of the same browser, watched as the first.
func (b *browser) tab(t *testing.T) *browser {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	nb := &browser{ctx: ctx}
	nb.watch(ctx)
	return nb
}

func (b *browser) watch(ctx context.Context) {
	go func() {
		for ev, err := range chromedp.Events(ctx, log.EntryAdded) {
			if err != nil {
				return
			}
			e := ev.Entry
			if e.Level == log.EntryLevelError || e.Source == log.EntrySourceSecurity || strings.Contains(e.Text, "Content Security Policy") {
				b.problem(fmt.Sprintf("log %s/%s: %s (%s)", e.Source, e.Level, e.Text, e.URL))
			}
		}
	}()
	go func() {
		for ev, err := range chromedp.Events(ctx, runtime.ConsoleAPICalled) {
			if err != nil {
				return
			}
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				b.problem(fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		}
	}()
	go func() {
		for ev, err := range chromedp.Events(ctx, runtime.ExceptionThrown) {
			if err != nil {
				return
			}
			b.problem((&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		}
	}()
}

func (b *browser) problem(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, s)
}

// noProblems fails the test with every console error, exception and CSP
// violation the pages caused.
func (b *browser) noProblems(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		// A followed log's stream ends with the tab; its abort is not a
		// page problem.
		if strings.Contains(p, "net::ERR_ABORTED") {
			continue
		}
		t.Errorf("browser: %s", p)
	}
}

// do runs steps, failing the test on an error.
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func evalJS[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("browser: evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor waits until the JavaScript condition cond holds in the page: a
// promise resolved by a MutationObserver on the document when the
// condition becomes true (no polling interval). The expression is run by
// DevTools, not by the page, so the page's CSP does not apply to it.
func (b *browser) waitFor(t *testing.T, what, cond string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	expr := fmt.Sprintf(`new Promise((resolve) => {
  const ok = () => { try { return !!(%s); } catch (e) { return false; } };
  if (ok()) { resolve(true); return; }
  const mo = new MutationObserver(() => { if (ok()) { mo.disconnect(); resolve(true); } });
  mo.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
})`, cond)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("browser: waiting %s for %s (%s): %v", timeout, what, cond, err)
	}
}

// screenshot saves the viewport as a PNG in the test's artifact directory
// (kept with go test -artifacts) and returns its path.
func (b *browser) screenshot(t *testing.T, dir, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("browser: screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
