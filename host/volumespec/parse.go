package volumespec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"

	"berth.dev/berth/internal/hclsrc"
	"berth.dev/berth/rpc/pb"
)

// ParseFile reads the volume file at path and parses it (see Parse).
func ParseFile(path string, mode Mode) (*pb.Volume, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("volume file: %w", err)
	}
	return Parse(path, src, mode)
}

// Parse parses a volume file: HCL, or HCL's JSON syntax when filename ends
// in ".json". The volume has passed Validate for mode and has its name
// filled in. On failure the error is *Errors listing every problem with its
// position and field path.
func Parse(filename string, src []byte, mode Mode) (*pb.Volume, error) {
	d := &decoder{pos: map[string]Pos{}, reported: map[string]bool{}}
	if !utf8.Valid(src) {
		d.errs.add(Pos{File: filename, Line: 1, Column: 1}, "", ErrSyntax, "syntax error: the file is not valid UTF-8")
		return nil, d.errs.err()
	}
	var file *hcl.File
	var diags hcl.Diagnostics
	if strings.EqualFold(filepath.Ext(filename), ".json") {
		if p, ok := hclsrc.JSONRootArray(src); ok {
			d.errs.add(Pos{File: filename, Line: p.Line, Column: p.Column}, "", ErrWrongType,
				"the root of a JSON volume file must be an object, not an array")
			return nil, d.errs.err()
		}
		file, diags = hcljson.Parse(src, filename)
		diags = hclsrc.DropRootEcho(src, diags)
	} else {
		var s []byte
		s, d.split = hclsrc.SplitCompact(src, filename)
		file, diags = hclsyntax.ParseConfig(s, filename, hcl.InitialPos)
	}
	if diags.HasErrors() {
		d.diags(diags, "", ErrSyntax)
		return nil, d.errs.err()
	}
	d.pos[""] = Pos{File: filename, Line: 1, Column: 1}
	v := d.volume(file.Body)
	d.errs.Volume = v.GetId()
	Canonicalize(v)
	validate(v, mode, func(path, format string, args ...any) {
		if d.reported[path] {
			return
		}
		d.errs.add(d.posOf(path), path, ErrInvalidVolume, format, args...)
	})
	if err := d.errs.err(); err != nil {
		return nil, err
	}
	return v, nil
}

// decoder turns one parsed file into a volume, collecting every problem
// and recording where each field was written.
type decoder struct {
	errs  Errors
	split *hclsrc.LineSplit
	pos   map[string]Pos
	// reported are paths already reported while decoding, so validation
	// does not add "is required" about a value it could not read.
	reported map[string]bool
}

// posOf is where path, or the nearest field containing it, was written.
func (d *decoder) posOf(path string) Pos {
	for {
		if p, ok := d.pos[path]; ok {
			return p
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return d.pos[""]
		}
		path = path[:i]
	}
}

func (d *decoder) rangePos(r hcl.Range) Pos {
	p := r.Start
	if d.split != nil {
		p = d.split.Pos(p)
	}
	return Pos{File: r.Filename, Line: p.Line, Column: p.Column}
}

func (d *decoder) errAt(r hcl.Range, path string, kind error, format string, args ...any) {
	d.errs.add(d.rangePos(r), path, kind, format, args...)
	d.reported[path] = true
}

func (d *decoder) diags(diags hcl.Diagnostics, path string, kind error) {
	for _, diag := range diags {
		if diag.Severity != hcl.DiagError {
			continue
		}
		var pos Pos
		if diag.Subject != nil {
			pos = d.rangePos(*diag.Subject)
		}
		msg := diag.Summary
		if diag.Detail != "" {
			msg += ": " + diag.Detail
		}
		if kind == ErrSyntax {
			msg = "syntax error: " + msg
		}
		d.errs.add(pos, path, kind, "%s", msg)
		if path != "" {
			d.reported[path] = true
		}
	}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// content extracts attrs and blocks from body at path and reports every
// other key, with the one it was probably meant to be.
func (d *decoder) content(body hcl.Body, path string, attrs, blocks []string) *hcl.BodyContent {
	hs := &hcl.BodySchema{}
	isAttr, isBlock := map[string]bool{}, map[string]bool{}
	known := append(append([]string(nil), attrs...), blocks...)
	for _, a := range attrs {
		hs.Attributes = append(hs.Attributes, hcl.AttributeSchema{Name: a})
		isAttr[a] = true
	}
	for _, b := range blocks {
		hs.Blocks = append(hs.Blocks, hcl.BlockHeaderSchema{Type: b})
		isBlock[b] = true
	}
	content, remain, diags := body.PartialContent(hs)
	d.diags(diags, path, ErrWrongType)
	unknown := func(r hcl.Range, name string) {
		msg := "unknown key"
		if s := hclsrc.Suggest(name, known); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
			d.reported[join(path, s)] = true
		}
		d.errAt(r, join(path, name), ErrUnknownKey, "%s", msg)
	}
	if sb, ok := body.(*hclsyntax.Body); ok {
		for name, a := range sb.Attributes {
			switch {
			case isAttr[name]:
			case isBlock[name]:
				d.errAt(a.NameRange, join(path, name), ErrWrongType, "block required, got argument (write %s { ... } without =)", name)
			default:
				unknown(a.NameRange, name)
			}
		}
		for _, b := range sb.Blocks {
			switch {
			case isBlock[b.Type]:
			case isAttr[b.Type]:
				d.errAt(b.TypeRange, join(path, b.Type), ErrWrongType, "argument required, got block (write %s = ...)", b.Type)
			default:
				unknown(b.TypeRange, b.Type)
			}
		}
		return content
	}
	rest, diags := remain.JustAttributes()
	d.diags(diags, path, ErrWrongType)
	for name, a := range rest {
		unknown(a.NameRange, name)
	}
	return content
}

// single returns the one block of type typ, reporting further ones.
func (d *decoder) single(blocks hcl.Blocks, typ, path string) *hcl.Block {
	var first *hcl.Block
	for _, b := range blocks.OfType(typ) {
		if first != nil {
			d.errs.add(d.rangePos(b.DefRange), join(path, typ), ErrInvalidVolume, "duplicate %s block (first at %s)", typ, d.rangePos(first.DefRange))
			continue
		}
		first = b
		d.pos[join(path, typ)] = d.rangePos(b.DefRange)
	}
	return first
}

// value evaluates an argument, without variables or functions.
func (d *decoder) value(a *hcl.Attribute, path string) (cty.Value, bool) {
	d.pos[path] = d.rangePos(a.NameRange)
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		d.diags(diags, path, ErrInvalidVolume)
		return cty.NilVal, false
	}
	v, _ = v.UnmarkDeep()
	if !v.IsWhollyKnown() {
		d.errAt(a.Expr.Range(), path, ErrInvalidVolume, "value cannot be known when the file is read")
		return cty.NilVal, false
	}
	return v, !v.IsNull()
}

func (d *decoder) str(a *hcl.Attribute, path string) (string, bool) {
	v, ok := d.value(a, path)
	if !ok {
		return "", false
	}
	if v.Type() != cty.String {
		d.errAt(a.Expr.Range(), path, ErrWrongType, "a string is required, got %s", v.Type().FriendlyName())
		return "", false
	}
	return v.AsString(), true
}

func (d *decoder) strings(a *hcl.Attribute, path string) []string {
	v, ok := d.value(a, path)
	if !ok {
		return nil
	}
	if !v.Type().IsListType() && !v.Type().IsTupleType() {
		d.errAt(a.Expr.Range(), path, ErrWrongType, "a list of strings is required, got %s", v.Type().FriendlyName())
		return nil
	}
	var out []string
	for i, it := 0, v.ElementIterator(); it.Next(); i++ {
		_, e := it.Element()
		if e.IsNull() || e.Type() != cty.String {
			d.errAt(a.Expr.Range(), fmt.Sprintf("%s[%d]", path, i), ErrWrongType, "a string is required")
			return nil
		}
		out = append(out, e.AsString())
	}
	return out
}

// stringMap reads a block of string arguments (secrets, parameters,
// context, segments).
func (d *decoder) stringMap(b *hcl.Block, path string) map[string]string {
	attrs, diags := b.Body.JustAttributes()
	if diags.HasErrors() {
		d.diags(diags, path, ErrWrongType)
		return nil
	}
	out := map[string]string{}
	for name, a := range attrs {
		if s, ok := d.str(a, join(path, name)); ok {
			out[name] = s
		}
	}
	return out
}
