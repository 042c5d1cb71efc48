package hclsrc

import (
	"errors"
	"fmt"
	"testing"

	"github.com/zclconf/go-cty/cty"
)

var (
	errSyntax  = errors.New("syntax")
	errUnknown = errors.New("unknown")
	errType    = errors.New("type")
	errInvalid = errors.New("invalid")
	errDup     = errors.New("dup")
	testKinds  = Kinds{Syntax: errSyntax, UnknownKey: errUnknown, WrongType: errType, Invalid: errInvalid, Duplicate: errDup}
)

func TestErrorFormat(t *testing.T) {
	pos := Pos{File: "a.hcl", Line: 2, Column: 3}
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{Pos: pos, Path: "server.x", Msg: "bad"}, "a.hcl:2:3: server.x: bad"},
		{Error{Pos: pos, Path: "server.x", Msg: `unknown key "x" in server block`, Named: true}, `a.hcl:2:3: unknown key "x" in server block`},
		{Error{Path: "server.x", Msg: "bad"}, "server.x: bad"},
		{Error{Pos: Pos{Line: 2}, Msg: "bad"}, "bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	cause := errors.New("cause")
	e := &Error{Kind: errInvalid, Cause: cause}
	if !errors.Is(e, errInvalid) || !errors.Is(e, cause) {
		t.Errorf("%+v does not unwrap to its kind and cause", e)
	}
}

func TestErrorsSortAndLines(t *testing.T) {
	var es Errors
	es.Add(Pos{}, "late", errInvalid, "no position")
	es.Add(Pos{File: "a", Line: 3, Column: 1}, "", errInvalid, "third line")
	es.AddNamed(Pos{File: "a", Line: 1, Column: 9}, "k", errUnknown, "named %q", "k")
	es.AddValue(Pos{File: "a", Line: 1, Column: 2}, "v", testKinds, &ValueError{Class: WrongType, Msg: "typed"})
	es.Sort()
	want := "a:1:2: v: typed\na:1:9: named \"k\"\na:3:1: third line\nlate: no position"
	if got := es.Error(); got != want {
		t.Errorf("sorted:\n%s\nwant:\n%s", got, want)
	}
	if !errors.Is(es, errType) || !errors.Is(es, errUnknown) || errors.Is(es, errSyntax) {
		t.Errorf("errors.Is through Errors is wrong for %v", es)
	}
}

func TestKindsOf(t *testing.T) {
	if got := testKinds.Of(fmt.Errorf("[1]: %w", &ValueError{Class: WrongType})); got != errType {
		t.Errorf("Of(wrapped WrongType) = %v", got)
	}
	if got := testKinds.Of(Invalidf("x")); got != errInvalid {
		t.Errorf("Of(Invalidf) = %v", got)
	}
	if err := invalidKind("x"); testKinds.Of(err) != errDup || !errors.Is(err, errDup) {
		t.Errorf("a ValueError with a Kind is not of that kind")
	}
	if got := testKinds.Of(errors.New("plain")); got != errInvalid {
		t.Errorf("Of(plain error) = %v", got)
	}
}

func TestFieldPath(t *testing.T) {
	p := FieldPath("")
	if got := p.Field("server").Field("retry_join").Index(1).String(); got != "server.retry_join[1]" {
		t.Errorf("path = %q", got)
	}
}

// parse decodes src with a schema of one argument and one block, at the
// top level.
func parse(t *testing.T, name, src string, style Style) *Decoder {
	t.Helper()
	d := &Decoder{Kinds: testKinds, Style: style, Reported: map[string]bool{}, Where: map[string]Pos{}}
	body := d.Parse(name, []byte(src), "test file")
	if body == nil {
		return d
	}
	c := d.Content(body, FieldPath(""), Schema{Attrs: []string{"name"}, Blocks: Blocks("server"), In: "test"})
	d.Single(c.Blocks, "server", FieldPath(""))
	if a := c.Attributes["name"]; a != nil {
		Read(d, a, FieldPath("name"), d.Style.String)
	}
	return d
}

func TestDecoderWording(t *testing.T) {
	agent := Style{NameKeys: true, BlockAtType: true}
	for _, tc := range []struct {
		name, file, src string
		style           Style
		want            string
	}{
		{"unknown key, path first", "a.hcl", "nmae = 1\n", Style{}, `a.hcl:1:1: nmae: unknown key; did you mean "name"?`},
		{"unknown key, named", "a.hcl", "nmae = 1\n", agent, `a.hcl:1:1: unknown key "nmae" in test (did you mean "name"?)`},
		{"block as argument", "a.hcl", "server = 1\n", Style{}, `a.hcl:1:1: server: block required, got argument (write server { ... } without =)`},
		{"argument as block", "a.hcl", "name {}\n", agent, `a.hcl:1:1: name: argument required, got block (write name = ...)`},
		{"duplicate", "a.hcl", "server {}\nserver {}\n", Style{}, `a.hcl:2:1: server: duplicate server block (first defined at a.hcl:1:1)`},
		{"duplicate, first at", "a.hcl", "server {}\nserver {}\n", Style{FirstAt: "first at"}, `a.hcl:2:1: server: duplicate server block (first at a.hcl:1:1)`},
		{"duplicate, named", "a.hcl", "server {}\nserver {}\n", agent, `a.hcl:2:1: duplicate server block (first defined at a.hcl:1:1)`},
		{"JSON list of blocks", "a.json", `{"server": [{}, {}]}`, agent, `a.json:1:2: duplicate server block (a list of them is given; only one is allowed)`},
		{"wrong type", "a.hcl", "name = 1\n", Style{}, `a.hcl:1:8: name: string required, got number`},
		{"wrong type, own words", "a.hcl", "name = [1]\n", Style{Required: func(want string, got cty.Type) string {
			return fmt.Sprintf("a %s is required, got %s", want, got.FriendlyName())
		}}, `a.hcl:1:8: name: a string is required, got tuple`},
		{"variables", "a.hcl", "name = x.y\n", Style{}, `a.hcl:1:8: name: Variables not allowed: Variables may not be used here.`},
		{"JSON root array", "a.json", "[]", Style{}, `a.json:1:1: the root of a JSON test file must be an object, not an array`},
		{"syntax", "a.hcl", "name = \n", Style{}, `a.hcl:1:8: syntax error: Invalid expression: Expected the start of an expression, but found an invalid expression token.`},
		{"compact style", "a.hcl", "server {} nmae = 1\n", Style{}, `a.hcl:1:11: nmae: unknown key; did you mean "name"?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := parse(t, tc.file, tc.src, tc.style)
			d.Errs.Sort()
			if got := d.Errs.Error(); got != tc.want {
				t.Errorf("errors:\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

func TestDecoderRecords(t *testing.T) {
	d := parse(t, "a.hcl", "nmae = 1\nserver {}\n", Style{})
	if !d.Reported["nmae"] || !d.Reported["name"] {
		t.Errorf("Reported = %v, want the unknown key and its suggestion", d.Reported)
	}
	if got, want := d.Where["server"], (Pos{File: "a.hcl", Line: 2, Column: 1}); got != want {
		t.Errorf("Where[server] = %v, want %v", got, want)
	}
	d = parse(t, "a.hcl", "name = \"v\"\n", Style{})
	if len(d.Errs) != 0 || d.Where["name"] != (Pos{File: "a.hcl", Line: 1, Column: 1}) {
		t.Errorf("errors %v, Where %v", d.Errs, d.Where)
	}
}

func TestTemplates(t *testing.T) {
	src := "name = \"${attr.kernel.name}-${1 + 1}\"\n"
	d := &Decoder{Kinds: testKinds, Style: Style{Templates: true}}
	c := d.Content(d.Parse("a.hcl", []byte(src), "test file"), FieldPath(""), Schema{Attrs: []string{"name"}})
	s, ok := Read(d, c.Attributes["name"], FieldPath("name"), d.Style.String)
	if !ok || s != "${attr.kernel.name}-2" {
		t.Errorf("with Templates: %q, %v (errors %v)", s, ok, d.Errs)
	}
	d = &Decoder{Kinds: testKinds}
	c = d.Content(d.Parse("a.hcl", []byte(src), "test file"), FieldPath(""), Schema{Attrs: []string{"name"}})
	if _, ok := Read(d, c.Attributes["name"], FieldPath("name"), d.Style.String); ok || !errors.Is(d.Errs, errInvalid) {
		t.Errorf("without Templates a reference was read (errors %v)", d.Errs)
	}
}

func TestConversions(t *testing.T) {
	s := &Style{Durations: [4]string{"500ms", "30s", "5m", "1h"}}
	for _, tc := range []struct {
		name  string
		err   error
		want  string
		class Class
	}{
		{"duration type", second(s.Duration(cty.NumberIntVal(1))), `duration string (like "30s") required, got number`, WrongType},
		{"duration text", second(s.Duration(cty.StringVal("5x"))), `invalid duration "5x" (want a number and a unit, like "500ms", "30s", "5m" or "1h")`, Invalid},
		{"null", second(s.String(cty.NullVal(cty.String))), "string required, got null", WrongType},
		{"fraction", second(s.Int64(cty.NumberFloatVal(1.5))), "whole number required, got 1.5", WrongType},
		{"range", second(s.IntIn(cty.NumberIntVal(1<<40), -1<<31, 1<<31-1)), "1099511627776 is too large", Invalid},
		{"negative", second(s.Uint64(cty.NumberIntVal(-1))), "must not be negative, got -1", Invalid},
		{"list", second(s.List(cty.StringVal("a"))), "list of strings required, got string", WrongType},
		{"own kind", invalidKind("x"), "x", Invalid},
		{"text of an object", second(s.Text(cty.EmptyObjectVal)), "string required, got object", WrongType},
		{"huge number", second(s.Text(cty.MustParseNumberVal("1e9999999"))), "number 1e+9999999 or so is out of range", Invalid},
	} {
		ve, ok := errors.AsType[*ValueError](tc.err)
		if !ok || ve.Msg != tc.want || ve.Class != tc.class {
			t.Errorf("%s: %v, want %s %q", tc.name, tc.err, map[Class]string{WrongType: "WrongType", Invalid: "Invalid"}[tc.class], tc.want)
		}
	}
	if got, err := s.Text(cty.NumberIntVal(8080)); err != nil || got != "8080" {
		t.Errorf("Text(8080) = %q, %v", got, err)
	}
	_, err := s.Duration(cty.StringVal("5x"))
	if ve, ok := errors.AsType[*ValueError](err); !ok || ve.Cause == nil || !errors.Is(err, ve.Cause) {
		t.Errorf("an invalid duration does not carry time.ParseDuration's error")
	}
}

func invalidKind(msg string) error {
	return &ValueError{Class: Invalid, Kind: errDup, Msg: msg}
}

func second[T any](_ T, err error) error { return err }

func TestBlocks(t *testing.T) {
	got := Blocks("a", "b")
	if len(got) != 2 || got[0].Type != "a" || got[1].Type != "b" || len(got[0].LabelNames) != 0 {
		t.Errorf("Blocks = %+v", got)
	}
	if !IsJSON("x/A.JSON") || IsJSON("a.hcl") {
		t.Errorf("IsJSON is wrong")
	}
}
