package endpoints

import (
	"strings"
	"testing"
)

func TestPageOf(t *testing.T) {
	items := []string{"a", "b", "c", "d", "e"}
	id := func(s string) string { return s }
	notC := func(s string) bool { return s != "c" }
	for _, c := range []struct {
		from     string
		n        int
		keep     func(string) bool
		want     string
		wantNext string
	}{
		{"", 2, nil, "a,b", "c"},
		{"c", 2, nil, "c,d", "e"},
		{"e", 2, nil, "e", ""},
		{"", 5, nil, "a,b,c,d,e", ""},
		{"bb", 1, nil, "c", "d"}, // a token between keys starts at the next key
		{"z", 3, nil, "", ""},
		{"b", 2, notC, "b,d", "e"}, // filtered items neither count nor start a page
		{"a", 1, notC, "a", "b"},
		{"b", 1, notC, "b", "d"},
	} {
		page, next := PageOf(items, id, c.from, c.n, c.keep)
		if got := strings.Join(page, ","); got != c.want || next != c.wantNext {
			t.Errorf("pageOf(from %q, %d) = %q next %q; want %q next %q", c.from, c.n, got, next, c.want, c.wantNext)
		}
	}
}
