package acceptance

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// hostileName is the name of the UI test's job: rendered as markup it
// would run a script and an image's error handler.
const hostileName = `<script>window.pwned=1</script><img src=x onerror="window.pwned=2">`

func uiJob(id, vol string) string {
	return fmt.Sprintf(`
job %q {
  name = %q
  type = "service"
  group "app" {
    count = 1
    restart {
      attempts = 0
      mode     = "fail"
    }
    volume "data" {
      type            = "csi"
      source          = %q
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "user" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > local/pid; i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done"]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
      resources {
        cpu    = 20
        memory = 32
      }
      kill_timeout = "2s"
    }
  }
}
`, id, hostileName, vol)
}

// TestWebUIInABrowser drives the web UI of a dev agent in headless
// Chromium (Debian's chromium, over the DevTools protocol): a job using a
// CSI volume of the built-in hostpath plugin runs; every page is opened
// and its content checked (node ID, plugin counts, the claim and its
// state, the task's log followed); the job's hostile name renders as
// text; the keyboard reaches the stop button, the job is stopped from the
// page after a confirmation, and another tab showing the volume sees the
// claim leave without a reload. No page may log a CSP violation, a
// console error or an exception. Screenshots of every page at 1280×800,
// and of two at a phone's width, are saved as test artifacts (go test
// -artifacts keeps them).
func TestWebUIInABrowser(t *testing.T) {
	b := startBrowser(t)
	a := startDevAgent(t)
	t.Cleanup(func() { stopAllJobs(t, a, "uiweb") })
	waitPluginSchedulable(t, a, "hostpath", 1, 1)
	createVolume(t, a, "uivol", "hostpath")
	node := waitNodeStatus(t, a, "ready", 10*time.Second)
	runJob(t, a, "uiweb", uiJob("uiweb", "uivol"))
	alloc := waitVolumeUser(t, a, "uiweb", "uivol", node.ID, nil)
	v, err := a.volume("uivol")
	if err != nil || len(v.Claims) != 1 {
		t.Fatalf("volume uivol: %+v, %v; want one claim", v, err)
	}
	claim := v.Claims[0].ID
	claimRow := fmt.Sprintf("document.getElementById(%q)", "claim-"+claim)
	base := "http://" + a.httpAddr
	shots := t.ArtifactDir()
	t.Logf("screenshots in %s", shots)

	open := func(b *browser, path, ready string) {
		t.Helper()
		start := time.Now()
		b.do(t, "open "+path, chromedp.Navigate(base+path))
		loaded := time.Since(start)
		b.waitFor(t, path+" rendered", ready, 20*time.Second)
		t.Logf("%s: loaded in %s, rendered in %s", path, loaded.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
	text := func(b *browser, sel string) string {
		t.Helper()
		return evalJS[string](t, b, fmt.Sprintf("(document.querySelector(%q) || {textContent: ''}).textContent", sel))
	}
	wantText := func(b *browser, sel string, wants ...string) {
		t.Helper()
		got := text(b, sel)
		for _, w := range wants {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q has no %q", evalJS[string](t, b, "location.pathname"), got, w)
			}
		}
	}

	b.do(t, "viewport 1280x800", chromedp.EmulateViewport(1280, 800))

	// The root redirects to the overview.
	open(b, "/", "document.getElementById('nodes-total')")
	if p := evalJS[string](t, b, "location.pathname"); p != "/ui/" {
		t.Errorf("/ led to %s, want /ui/", p)
	}
	wantText(b, "#nodes-total", "1")
	wantText(b, "#overview-plugins", "hostpath", "1 / 1")
	wantText(b, "#overview-servers", "leader")
	b.screenshot(t, shots, "overview")

	open(b, "/ui/nodes", "document.getElementById('nodes')")
	wantText(b, "#nodes", node.ID[:8], "ready", "hostpath")
	b.screenshot(t, shots, "nodes")
	open(b, "/ui/nodes/"+node.ID, "document.getElementById('node-id')")
	if got := text(b, "#node-id"); got != node.ID {
		t.Errorf("node page shows ID %q, want %q", got, node.ID)
	}
	wantText(b, "main", "raw_exec", "hostpath")
	wantText(b, "#node-claims", "uivol", claim[:8], "in-use")
	b.screenshot(t, shots, "node")

	open(b, "/ui/plugins", "document.getElementById('plugins')")
	wantText(b, "#plugins", "hostpath", "hostpath.csi.berth.dev", "1 / 1")
	b.screenshot(t, shots, "plugins")
	open(b, "/ui/plugins/hostpath", "document.getElementById('plugin-instances')")
	wantText(b, "#plugin-controllers", "1 healthy of 1 expected")
	wantText(b, "#plugin-nodes", "1 healthy of 1 expected")
	wantText(b, "#plugin-instances", node.ID[:8], "healthy")
	b.screenshot(t, shots, "plugin")

	open(b, "/ui/volumes", "document.getElementById('volumes')")
	wantText(b, "#volumes", "uivol", "in-use 1")
	b.screenshot(t, shots, "volumes")
	open(b, "/ui/volumes/uivol", claimRow)
	if st := evalJS[string](t, b, claimRow+".dataset.state"); st != "in-use" {
		t.Errorf("claim %s shows state %q, want in-use", claim, st)
	}
	wantText(b, "#volume-claims", alloc.ID[:8], node.ID[:8])
	b.screenshot(t, shots, "volume")

	// The hostile name is text, and nothing of it ran.
	open(b, "/ui/jobs", "document.getElementById('jobs')")
	if !evalJS[bool](t, b, fmt.Sprintf("[...document.querySelectorAll('#jobs td')].some(td => td.textContent === %q)", hostileName)) {
		t.Errorf("the jobs list shows no cell with the text %q: %q", hostileName, text(b, "#jobs"))
	}
	b.screenshot(t, shots, "jobs")
	open(b, "/ui/jobs/uiweb", "document.querySelector('[data-action=stop-job]')")
	if !evalJS[bool](t, b, fmt.Sprintf("[...document.querySelectorAll('dd')].some(dd => dd.textContent === %q)", hostileName)) {
		t.Errorf("the job page shows no name %q", hostileName)
	}
	if n := evalJS[int](t, b, "document.scripts.length + document.images.length"); n != 1 {
		t.Errorf("the job page has %d scripts and images, want only ui.js", n)
	}
	if evalJS[bool](t, b, "window.pwned !== undefined") {
		t.Error("the job's name ran as script")
	}
	b.screenshot(t, shots, "job")

	// The alloc page follows the task's log as it is written.
	open(b, "/ui/allocs/"+alloc.ID, "document.querySelector('.log pre') && document.querySelector('.log pre').textContent.includes('tick')")
	wantText(b, "main", "user", "Started")
	ticks := strings.Count(text(b, ".log pre"), "tick")
	b.waitFor(t, "more log lines", fmt.Sprintf("document.querySelector('.log pre').textContent.split('tick').length - 1 > %d", ticks), 20*time.Second)
	b.screenshot(t, shots, "alloc")

	// A phone's width: nothing wider than the screen but the tables, which
	// scroll inside themselves.
	b.do(t, "viewport 390x844", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	for _, p := range []struct{ path, ready, name string }{
		{"/ui/", "document.getElementById('nodes-total')", "overview-phone"},
		{"/ui/volumes/uivol", claimRow, "volume-phone"},
	} {
		open(b, p.path, p.ready)
		if w := evalJS[int](t, b, "document.documentElement.scrollWidth - window.innerWidth"); w > 0 {
			t.Errorf("%s at 390 px is %d px wider than the screen", p.path, w)
		}
		b.screenshot(t, shots, p.name)
	}
	b.do(t, "viewport 1280x800", chromedp.EmulateViewport(1280, 800))

	// Live: this tab shows the volume; another stops the job.
	open(b, "/ui/volumes/uivol", claimRow)
	evalJS[bool](t, b, `(window.__noReload = true, window.__states = [`+claimRow+`.dataset.state], new MutationObserver(() => {
  const r = document.getElementById(`+strconv.Quote("claim-"+claim)+`);
  const s = r ? r.dataset.state : 'gone';
  if (window.__states[window.__states.length - 1] !== s) window.__states.push(s);
}).observe(document, {subtree: true, childList: true, attributes: true}), true)`)

	jt := b.tab(t)
	jt.do(t, "viewport", chromedp.EmulateViewport(1280, 800))
	open(jt, "/ui/jobs/uiweb", "document.querySelector('[data-action=stop-job]')")
	// The keyboard alone reaches the stop button and confirms.
	reached := false
	for range 60 {
		jt.do(t, "Tab", chromedp.KeyEvent(kb.Tab))
		if evalJS[string](t, jt, "document.activeElement.dataset.action || ''") == "stop-job" {
			reached = true
			break
		}
	}
	if !reached {
		t.Fatal("tabbing through the job page never reached the stop button")
	}
	jt.do(t, "Enter on stop", chromedp.KeyEvent(kb.Enter))
	jt.waitFor(t, "the confirmation dialog", "document.getElementById('confirm').open", 10*time.Second)
	if id := evalJS[string](t, jt, "document.activeElement.id"); id != "confirm-cancel" {
		t.Errorf("the confirmation opened with %q focused, want Cancel (the safe choice)", id)
	}
	stopAt := time.Now()
	jt.do(t, "Tab to confirm, Enter", chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Enter))
	jt.waitFor(t, "the stop's result", "document.getElementById('toast').textContent !== ''", 20*time.Second)
	if got := text(jt, "#toast"); got != "Job stopped." {
		t.Fatalf("stopping from the page: %q", got)
	}

	b.waitFor(t, "the claim row leaving without a reload", "!"+claimRow, 60*time.Second)
	states := evalJS[[]string](t, b, "window.__states")
	t.Logf("claim row gone %s after the stop; states seen: %v", time.Since(stopAt).Round(time.Millisecond), states)
	// The row moves on (releasing, when a render caught it: the release
	// may finish between two renders) and goes; it never comes back.
	if len(states) < 2 || states[0] != "in-use" || states[len(states)-1] != "gone" {
		t.Errorf("claim row states %v: want in-use first and gone last", states)
	}
	if i := slices.Index(states, "in-use"); i >= 0 && slices.Contains(states[i+1:], "in-use") {
		t.Errorf("claim row states %v: back to in-use after it moved on", states)
	}
	if !evalJS[bool](t, b, "window.__noReload === true") {
		t.Error("the volume page was reloaded")
	}
	wantText(b, "#volume-claims", "No claims.")
	b.screenshot(t, shots, "volume-after-stop")
	jt.waitFor(t, "the job page showing the stop", "document.getElementById('job-status') && !document.querySelector('[data-action=stop-job]')", 30*time.Second)

	// Actions by mouse: release an operator claim, drain the node.
	confirm := func(b *browser, action string) {
		t.Helper()
		b.do(t, "click "+action, chromedp.Click(chromedp.CSS("[data-action="+action+"]")))
		b.waitFor(t, "the confirmation of "+action, "document.getElementById('confirm').open", 10*time.Second)
		b.do(t, "confirm "+action, chromedp.Click(chromedp.CSS("#confirm-ok")))
		b.waitFor(t, "the result of "+action, "document.getElementById('toast').textContent !== ''", 20*time.Second)
		if got := text(b, "#toast"); strings.HasPrefix(got, "Failed") {
			t.Fatalf("%s: %s", action, got)
		}
	}
	createVolume(t, a, "uiop", "hostpath")
	opClaim, _ := operatorClaim(t, a, "uiop", "write")
	opRow := fmt.Sprintf("document.getElementById(%q)", "claim-"+opClaim)
	open(b, "/ui/volumes/uiop", opRow+" && "+opRow+".querySelector('[data-action=release-claim]')")
	confirm(b, "release-claim")
	b.waitFor(t, "the released operator claim leaving", "!"+opRow, 60*time.Second)
	waitVolumeFreed(t, a, "uiop", time.Now(), freeBound)

	open(b, "/ui/nodes/"+node.ID, "document.querySelector('[data-action=drain-on]')")
	confirm(b, "drain-on")
	b.waitFor(t, "the node ineligible after the drain", "document.getElementById('node-eligibility').textContent === 'ineligible'", 30*time.Second)
	var drained struct {
		Eligibility string `json:"eligibility"`
	}
	if err := a.getJSON("/v1/node/"+node.ID, &drained); err != nil || drained.Eligibility != "ineligible" {
		t.Errorf("after the drain from the page the API shows eligibility %q (%v), want ineligible", drained.Eligibility, err)
	}
	// The drain of an empty node is over at once: mark it eligible again.
	b.waitFor(t, "the drain over", "document.querySelector('[data-action=eligibility][data-eligibility=eligible]') && !document.querySelector('[data-action=drain-off]')", 30*time.Second)
	b.do(t, "clear the toast", chromedp.Evaluate[chromedp.Void]("document.getElementById('toast').textContent = ''"))
	confirm(b, "eligibility")
	b.waitFor(t, "the node eligible again", "document.getElementById('node-eligibility').textContent === 'eligible'", 30*time.Second)

	b.noProblems(t)
	jt.noProblems(t)
	if dst := os.Getenv("BERTH_UI_SCREENSHOT"); dst != "" {
		// `make ui-screenshot` refreshes the README's picture from this run.
		src, err := os.ReadFile(shots + "/volume.png")
		if err == nil {
			err = os.WriteFile(dst, src, 0o644)
		}
		if err != nil {
			t.Errorf("copying the volume page's screenshot to %s: %v", dst, err)
		}
	}
}
