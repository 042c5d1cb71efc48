package hclsrc

import (
	"cmp"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"
)

// Path names a field in messages, and is the key under which a Decoder
// records where the field was written and that a problem was reported
// about it. FieldPath is the plain dotted kind; the job spec has its own,
// which names objects by their labels (`group "api": count`).
type Path interface {
	String() string
	// Field is the field name inside the path.
	Field(name string) Path
	// Index is entry i of the list the path names.
	Index(i int) Path
}

// FieldPath is a dotted Path: "server.retry_join[1]"; "" is the file's
// top level.
type FieldPath string

func (p FieldPath) String() string { return string(p) }

// Field is p.name, or name at the top level.
func (p FieldPath) Field(name string) Path {
	if p == "" {
		return FieldPath(name)
	}
	return p + "." + FieldPath(name)
}

// Index is p[i].
func (p FieldPath) Index(i int) Path { return FieldPath(fmt.Sprintf("%s[%d]", p, i)) }

// Style is how a reader words the problems the kit reports and reads some
// values. The readers grew up apart before they shared this code, and their
// users know their words; the zero Style is the job spec's.
type Style struct {
	// NameKeys words problems with a key's name so that the message names
	// the key, without the path in front:
	//	unknown key "bootstap_expect" in server block (did you mean "bootstrap_expect"?)
	//	duplicate server block (first defined at agent.hcl:1:1)
	// rather than
	//	group "api": cuont: unknown key; did you mean "count"?
	//	group "api": duplicate restart block (first defined at web.hcl:3:5)
	NameKeys bool
	// BlockAtType places problems with a block at its type name rather
	// than at its header; the two differ in JSON only, where the header is
	// the object's "{".
	BlockAtType bool
	// FirstAt introduces the first block's position in a duplicate block's
	// message; "first defined at" when empty.
	FirstAt string
	// Templates keeps references to runtime values in strings as written
	// ("${attr.kernel.name}"): the node resolves them, not the reader.
	// Without it a reference is an error, as are variables anywhere.
	Templates bool
	// Durations are four examples of durations for the messages about one
	// (`like "500ms", "30s", "5m" or "1h"`); the second is the one named
	// when a value is not a string (`duration string (like "30s")`).
	Durations [4]string
	// Required words a value of the wrong type; nil means
	// "<want> required, got <TypeName>".
	Required func(want string, got cty.Type) string
}

// Schema is what a block may hold.
type Schema struct {
	Attrs  []string
	Blocks []hcl.BlockHeaderSchema
	// In names the block for messages that name their key ("server
	// block"); empty at the top level and for readers whose paths say it.
	In string
}

// Blocks is a schema entry without labels for each type.
func Blocks(types ...string) []hcl.BlockHeaderSchema {
	out := make([]hcl.BlockHeaderSchema, len(types))
	for i, t := range types {
		out[i] = hcl.BlockHeaderSchema{Type: t}
	}
	return out
}

// Decoder reads one file into a reader's own types, collecting every
// problem instead of stopping at the first and, when asked, recording where
// each field was written. A reader makes one per file with its Kinds and
// Style, calls Parse, then walks the body with Content, Single and the
// typed values.
type Decoder struct {
	// Errs is every problem found so far.
	Errs  Errors
	Kinds Kinds
	Style Style
	// Where, when not nil, records where each field was written, by path:
	// an argument at its name, a block at its header.
	Where map[string]Pos
	// Reported, when not nil, collects the paths a problem was reported
	// about (and the keys a misspelt one was probably meant to be), so
	// that a reader's validation does not add "is required" about a value
	// it could not read.
	Reported map[string]bool
	// DiagsReported counts HCL's own diagnostics about a path as reported
	// too; otherwise only the kit's own problems are.
	DiagsReported bool

	src   []byte     // what the parser read (after SplitCompact)
	split *LineSplit // non-nil when SplitCompact changed the source
}

// IsJSON reports whether a file is read as JSON: its name ends in ".json".
func IsJSON(filename string) bool {
	return strings.EqualFold(filepath.Ext(filename), ".json")
}

// Parse parses src: HCL, or HCL's JSON syntax when IsJSON(filename). what
// names the file's kind in the message for a JSON array at the root ("job
// file", "configuration"). It returns nil when src does not parse, having
// recorded why.
func (d *Decoder) Parse(filename string, src []byte, what string) hcl.Body {
	d.src = src
	var file *hcl.File
	var diags hcl.Diagnostics
	if IsJSON(filename) {
		// HCL's JSON syntax also allows an array of objects at the root;
		// berth does not, so that unknown keys can be found in one object.
		if p, ok := JSONRootArray(src); ok {
			d.Errs.Add(Pos{File: filename, Line: p.Line, Column: p.Column}, "", d.Kinds.WrongType,
				"the root of a JSON %s must be an object, not an array", what)
			return nil
		}
		file, diags = hcljson.Parse(src, filename)
		diags = DropRootEcho(src, diags)
	} else {
		d.src, d.split = SplitCompact(src, filename)
		file, diags = hclsyntax.ParseConfig(d.src, filename, hcl.InitialPos)
	}
	if diags.HasErrors() {
		d.Diags(diags, FieldPath(""), d.Kinds.Syntax)
		return nil
	}
	return file.Body
}

// Pos is where r starts in the file as written.
func (d *Decoder) Pos(r hcl.Range) Pos {
	p := r.Start
	if d.split != nil {
		p = d.split.Pos(p)
	}
	return Pos{File: r.Filename, Line: p.Line, Column: p.Column}
}

// ErrAt records a problem with p at r, and that p was reported.
func (d *Decoder) ErrAt(r hcl.Range, p Path, kind error, format string, args ...any) {
	d.Errs.Add(d.Pos(r), p.String(), kind, format, args...)
	d.report(p)
}

// Fail records err, a problem with the value of p at r, as Kinds.Of
// classes it, and that p was reported.
func (d *Decoder) Fail(r hcl.Range, p Path, err error) {
	d.Errs.AddValue(d.Pos(r), p.String(), d.Kinds, err)
	d.report(p)
}

func (d *Decoder) report(p Path) {
	if d.Reported != nil {
		d.Reported[p.String()] = true
	}
}

// Diags records HCL's own diagnostics about p, which it phrases as a
// summary and a detail sentence, both worth keeping.
func (d *Decoder) Diags(diags hcl.Diagnostics, p Path, kind error) {
	for _, diag := range diags {
		if diag.Severity != hcl.DiagError {
			continue
		}
		var pos Pos
		if diag.Subject != nil {
			pos = d.Pos(*diag.Subject)
		}
		msg := diag.Summary
		if diag.Detail != "" {
			msg += ": " + diag.Detail
		}
		if kind == d.Kinds.Syntax {
			msg = "syntax error: " + msg
		}
		d.Errs.Add(pos, p.String(), kind, "%s", msg)
		if d.DiagsReported && p.String() != "" {
			d.report(p)
		}
	}
}

// Content extracts what s describes from body, which is at p, and reports
// every other key as unknown, with the known key it was probably meant to
// be.
func (d *Decoder) Content(body hcl.Body, p Path, s Schema) *hcl.BodyContent {
	hs := &hcl.BodySchema{Blocks: s.Blocks}
	isAttr, isBlock := map[string]bool{}, map[string]bool{}
	var known []string
	for _, a := range s.Attrs {
		hs.Attributes = append(hs.Attributes, hcl.AttributeSchema{Name: a})
		isAttr[a] = true
		known = append(known, a)
	}
	for _, b := range s.Blocks {
		isBlock[b.Type] = true
		known = append(known, b.Type)
	}
	content, remain, diags := body.PartialContent(hs)
	d.Diags(diags, p, d.Kinds.WrongType)

	unknown := func(r hcl.Range, name string) {
		hint := Suggest(name, known)
		if d.Style.NameKeys {
			msg := fmt.Sprintf("unknown key %q", name)
			if s.In != "" {
				msg += " in " + s.In
			}
			if hint != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", hint)
			}
			d.Errs.AddNamed(d.Pos(r), p.Field(name).String(), d.Kinds.UnknownKey, "%s", msg)
			d.report(p.Field(name))
			return
		}
		msg := "unknown key"
		if hint != "" {
			msg += fmt.Sprintf("; did you mean %q?", hint)
			d.report(p.Field(hint))
		}
		d.ErrAt(r, p.Field(name), d.Kinds.UnknownKey, "%s", msg)
	}
	// Native syntax tells arguments from blocks, so a block written as an
	// argument (or the reverse) gets its own message; JSON cannot tell them
	// apart, and what the schema does not claim is simply unknown.
	if sb, ok := body.(*hclsyntax.Body); ok {
		for name, a := range sb.Attributes {
			switch {
			case isAttr[name]:
			case isBlock[name]:
				d.ErrAt(a.NameRange, p.Field(name), d.Kinds.WrongType, "block required, got argument (write %s { ... } without =)", name)
			default:
				unknown(a.NameRange, name)
			}
		}
		for _, b := range sb.Blocks {
			switch {
			case isBlock[b.Type]:
			case isAttr[b.Type]:
				d.ErrAt(b.TypeRange, p.Field(b.Type), d.Kinds.WrongType, "argument required, got block (write %s = ...)", b.Type)
			default:
				unknown(b.TypeRange, b.Type)
			}
		}
		return content
	}
	rest, diags := remain.JustAttributes()
	d.Diags(diags, p, d.Kinds.WrongType)
	for name, a := range rest {
		unknown(a.NameRange, name)
	}
	return content
}

// Single returns the one block of type typ inside p, reporting any further
// ones as duplicates; nil when there is none.
func (d *Decoder) Single(blocks hcl.Blocks, typ string, p Path) *hcl.Block {
	var first *hcl.Block
	for _, b := range blocks.OfType(typ) {
		if first != nil {
			d.Duplicate(first, b, p.Field(typ), typ+" block")
			continue
		}
		first = b
		if d.Where != nil {
			d.Where[p.Field(typ).String()] = d.Pos(b.DefRange)
		}
	}
	return first
}

// Duplicate reports block dup, at p, as a second definition of first; what
// names it (`task "web"`, "server block"). In JSON both may come from one
// array under one key, and so share a position.
func (d *Decoder) Duplicate(first, dup *hcl.Block, p Path, what string) {
	at := func(b *hcl.Block) Pos {
		if d.Style.BlockAtType {
			return d.Pos(b.TypeRange)
		}
		return d.Pos(b.DefRange)
	}
	pos, firstPos := at(dup), at(first)
	e := &Error{Pos: pos, Path: p.String(), Kind: d.Kinds.Duplicate, Named: d.Style.NameKeys}
	if pos == firstPos {
		e.Msg = fmt.Sprintf("duplicate %s (a list of them is given; only one is allowed)", what)
	} else {
		e.Msg = fmt.Sprintf("duplicate %s (%s %s)", what, cmp.Or(d.Style.FirstAt, "first defined at"), firstPos)
	}
	d.Errs = append(d.Errs, e)
}
