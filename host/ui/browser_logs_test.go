package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"berth.dev/berth/rpc/pb"
)

// logServer serves the UI over f and a followed log route answering
// "hello from <task>" to the token f takes (to any caller when f has
// none), then holding the stream open.
func logServer(t *testing.T, f *fakeAPI, h http.Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET /v1/client/fs/logs/{alloc}", func(w http.ResponseWriter, r *http.Request) {
		if f.token != "" && r.Header.Get("X-Berth-Token") != f.token {
			apiError(w, http.StatusForbidden, "permission_denied", "Permission denied: the token's policies do not grant read-logs")
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello from %s\n", r.URL.Query().Get("task"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	// After the browser stops (cleanups run last first).
	t.Cleanup(srv.Close)
	return srv
}

// waitJS waits until expr is true in the page, watching the DOM.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(c, chromedp.Evaluate[bool](`new Promise((resolve) => {
  const ok = () => { try { return !!(`+expr+`); } catch (e) { return false; } };
  if (ok()) { resolve(true); return; }
  const mo = new MutationObserver(() => { if (ok()) { mo.disconnect(); resolve(true); } });
  mo.observe(document, {subtree: true, childList: true, characterData: true});
})`, chromedp.EvalAwaitPromise)); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('main').textContent`))
		t.Fatalf("%s: %v\n%s", what, err, body)
	}
}

// TestBrowserAllocLogsUnderACL: under ACL the allocation page is first
// served as a 403 (a navigation carries no token); once the token is in
// the page, the task's state shows and so does its followed log. And a
// page opened before any task reported grows a log box when one does.
func TestBrowserAllocLogsUnderACL(t *testing.T) {
	f := fixtures()
	f.deny["/v1/allocation/{id}"] = "read-job"
	f.token = secret1
	_, h := newTestHandler(t, f)
	srv := logServer(t, f, h)
	ctx := startChromium(t)
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(c, chromedp.Navigate(srv.URL+"/ui/allocs/"+allocID)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the 403", `document.getElementById('live').textContent.includes('read-job')`)
	if err := chromedp.Do(c, chromedp.Focus(chromedp.CSS("#token-input")), chromedp.KeyEvent(secret1), chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the task's state after the token", `document.getElementById('live').textContent.includes('Task user')`)
	waitJS(t, ctx, "the task's log after the token", `document.querySelector('.log pre').textContent.includes('hello from user')`)

	// Before any task reported: no box; the task reports, its box comes.
	f.mu.Lock()
	states := f.allocs[0].TaskStates
	f.allocs[0].TaskStates = nil
	f.mu.Unlock()
	if err := chromedp.Do(c, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the page before any task", `document.getElementById('live').textContent.includes('No task has reported yet')`)
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.log').length`)); err != nil || n != 0 {
		t.Fatalf("log boxes before any task: %d (%v)", n, err)
	}
	f.bump(func() { f.allocs[0].TaskStates = states })
	waitJS(t, ctx, "the task's log once it reported", `document.querySelector('.log pre').textContent.includes('hello from user')`)
	// A re-render keeps the stream's text and does not add a second box.
	f.bump(func() { f.allocs[0].ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE })
	waitJS(t, ctx, "the re-render", `document.getElementById('alloc-status').textContent === 'complete'`)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelectorAll('.log').length + ' ' + document.querySelector('.log pre').textContent`))
	if err != nil || !strings.HasPrefix(got, "1 hello from user") {
		t.Fatalf("after a re-render: %q (%v), want one box with its text", got, err)
	}
}
