package hclsrc

import (
	"testing"

	"github.com/hashicorp/hcl/v2"
	hcljson "github.com/hashicorp/hcl/v2/json"
)

func TestJSONRootArray(t *testing.T) {
	for _, tc := range []struct {
		src       string
		ok        bool
		line, col int
	}{
		{src: `{"a": 1}`},
		{src: ``},
		{src: `[{"a": 1}]`, ok: true, line: 1, col: 1},
		{src: "\n\n  \t[]", ok: true, line: 3, col: 4},
		{src: "  {\"a\": [1]}"},
	} {
		pos, ok := JSONRootArray([]byte(tc.src))
		if ok != tc.ok || ok && (pos.Line != tc.line || pos.Column != tc.col) {
			t.Errorf("JSONRootArray(%q) = %d:%d %v, want %d:%d %v", tc.src, pos.Line, pos.Column, ok, tc.line, tc.col, tc.ok)
		}
	}
}

func TestDropRootEcho(t *testing.T) {
	src := []byte("{\n  \"a\": ,\n}")
	_, diags := hcljson.Parse(src, "a.json")
	if len(diags) < 2 {
		t.Fatalf("the JSON parser no longer echoes a root diagnostic (got %v); DropRootEcho may be obsolete", diags)
	}
	got := DropRootEcho(src, diags)
	if len(got) != len(diags)-1 {
		t.Fatalf("DropRootEcho kept %d of %d diagnostics, want one fewer", len(got), len(diags))
	}
	for _, d := range got {
		if d.Subject != nil && d.Subject.Start.Byte == 0 {
			t.Errorf("the echo at the root's brace is still there: %v", d)
		}
	}
	// A lone diagnostic, or one not at the root's brace, is the real one.
	one := hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "x", Subject: &hcl.Range{}}}
	if len(DropRootEcho(src, one)) != 1 {
		t.Errorf("DropRootEcho dropped the only diagnostic")
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"driver", "config", "resources", "kill_timeout", "="}
	for name, want := range map[string]string{
		"drvier":      "driver",
		"confg":       "config",
		"resouces":    "resources",
		"kill_timout": "kill_timeout",
		"image":       "",
		"":            "",
		"x":           "",
	} {
		if got := Suggest(name, known); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", name, got, want)
		}
	}
}
