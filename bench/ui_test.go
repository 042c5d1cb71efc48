package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestUISectionSmoke runs the ui section's quick plan end to end (the
// berth binary of this tree, built here unless BERTH_BIN names one, as a
// dev agent the state is restored into) and checks what it measured: every
// page and its static files loaded, each load under the 300 KB target, the
// overview counting the restored nodes, and the volumes list paged as the
// API pages (100 rows of the state's 200 and a link to the next page).
func TestUISectionSmoke(t *testing.T) {
	bin := os.Getenv("BERTH_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "berth")
		cmd := exec.Command("go", "build", "-o", bin, "berth.dev/berth")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building berth: %v\n%s", err, out)
		}
	}
	rep, err := measureUI(context.Background(), bin, quickUIPlan)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.pages) != 9 {
		t.Fatalf("%d pages measured, want 9", len(rep.pages))
	}
	for _, p := range rep.pages {
		first := rep.first[p.name]
		if first.files != 3 || first.html == 0 {
			t.Errorf("%s: first load read %d bytes of HTML and %d static files, want a page and its 3 files", p.name, first.html, first.files)
		}
		if got := len(rep.loads[p.name]); got != quickUIPlan.reps {
			t.Errorf("%s: %d loads measured, want %d", p.name, got, quickUIPlan.reps)
		}
		for i, l := range append(rep.loads[p.name], first) {
			if l.ttlb <= 0 || l.wire <= l.html {
				t.Errorf("%s load %d: %v, %d bytes on the wire for %d of HTML", p.name, i, l.ttlb, l.wire, l.html)
			}
			if l.wire >= uiBytesTarget {
				t.Errorf("%s load %d: %d bytes on the wire, want under %d", p.name, i, l.wire, uiBytesTarget)
			}
		}
		if _, bytesOK := rep.met(p.name); !bytesOK {
			t.Errorf("%s: the report says it misses the size target", p.name)
		}
	}
	overview := string(rep.first["overview"].body)
	if want := fmt.Sprintf(`id="nodes-total">%d <small>`, rep.built.nodes); !strings.Contains(overview, want) {
		t.Errorf("the overview does not count the restored nodes (want %q):\n%s", want, overview)
	}
	volumes := string(rep.first["volumes"].body)
	rows := regexp.MustCompile(`<td><a href="/ui/volumes/[^"]+">`).FindAllString(volumes, -1)
	if len(rows) != 100 || !strings.Contains(volumes, `rel="next"`) {
		t.Errorf("the volumes list of %d volumes shows %d rows, next link %t; want 100 and a next link",
			rep.built.volumes, len(rows), strings.Contains(volumes, `rel="next"`))
	}
	var out strings.Builder
	if err := rep.print(&out, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.pages {
		if !regexp.MustCompile(`(?m)^\| ` + p.name + ` \| .*\| (meets|MISSES the time) \|$`).MatchString(out.String()) {
			t.Errorf("the table has no row for %s meeting the size target:\n%s", p.name, out.String())
		}
	}
}
