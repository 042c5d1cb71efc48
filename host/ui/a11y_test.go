package ui

import (
	"regexp"
	"strings"
	"testing"

	"berth.dev/berth/rpc/pb"
)

var idAttr = regexp.MustCompile(`\sid="([^"]*)"`)

// TestAccessibleMarkup: no page has an ID twice (the overview with every
// part refused had five error boxes with one ID) or an ID with
// whitespace (a task name in an ID broke aria-labelledby); the dialog is
// described by its question; the toast's live region is there from the
// start; every table scrolls in a focusable region.
func TestAccessibleMarkup(t *testing.T) {
	f := fixtures()
	f.allocs[0].TaskStates["two words"] = &pb.TaskState{}
	_, h := newTestHandler(t, f)
	denied := fixtures()
	for _, p := range []string{"/v1/nodes", "/v1/jobs", "/v1/plugins", "/v1/volumes/claims", "/v1/operator/raft/configuration"} {
		denied.deny[p] = "some-capability"
	}
	_, hDenied := newTestHandler(t, denied)
	pages := map[string]string{}
	for _, p := range []string{"/ui/", "/ui/jobs", "/ui/jobs/web", "/ui/allocs/" + allocID, "/ui/nodes", "/ui/nodes/" + nodeID, "/ui/plugins", "/ui/plugins/hostpath", "/ui/volumes", "/ui/volumes/vol1"} {
		pages[p] = get(t, h, p).body
	}
	pages["overview, every part refused"] = get(t, hDenied, "/ui/").body
	for name, body := range pages {
		seen := map[string]bool{}
		for _, m := range idAttr.FindAllStringSubmatch(body, -1) {
			if seen[m[1]] {
				t.Errorf("%s: id %q twice", name, m[1])
			}
			if strings.ContainsAny(m[1], " \t\n") {
				t.Errorf("%s: id %q has whitespace", name, m[1])
			}
			seen[m[1]] = true
		}
		wantNotIn(t, name, body, `name="token"`)
		wantIn(t, name, body, `aria-describedby="confirm-text"`, `<p id="toast" class="toast" role="status"></p>`)
		if n, m := strings.Count(body, "<table"), strings.Count(body, `<div class="scroll" role="region" tabindex="0"`); n != m {
			t.Errorf("%s: %d tables, %d in a focusable scrolling region", name, n, m)
		}
	}
	if n := strings.Count(pages["overview, every part refused"], `class="error"`); n < 5 {
		t.Errorf("overview with every part refused: %d error boxes, want 5", n)
	}
}
