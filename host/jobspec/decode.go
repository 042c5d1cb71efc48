package jobspec

import (
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"berth.dev/berth/internal/hclsrc"
)

// decoder turns one parsed file into a job, collecting every problem instead
// of stopping at the first, and recording where each field was written.
type decoder struct {
	errs  Errors
	src   []byte            // what the parser read (after hclsrc.SplitCompact)
	split *hclsrc.LineSplit // non-nil when SplitCompact changed the source
	pos   positions
	// reported are paths already reported while decoding (a value of the
	// wrong type, or the key a misspelt one was probably meant to be), so
	// that validation does not add "required" or "must be positive" about
	// the same field.
	reported map[string]bool
}

func (d *decoder) posOf(r hcl.Range) Pos {
	p := r.Start
	if d.split != nil {
		p = d.split.Pos(p)
	}
	return Pos{File: r.Filename, Line: p.Line, Column: p.Column}
}

// errAt records a problem with p at r.
func (d *decoder) errAt(r hcl.Range, p path, kind error, format string, args ...any) {
	d.errs.add(d.posOf(r), p.String(), kind, format, args...)
	d.reported[p.String()] = true
}

// diags records HCL's own diagnostics, which it phrases as a summary and a
// detail sentence, both worth keeping.
func (d *decoder) diags(diags hcl.Diagnostics, p path, kind error) {
	for _, diag := range diags {
		if diag.Severity != hcl.DiagError {
			continue
		}
		var pos Pos
		if diag.Subject != nil {
			pos = d.posOf(*diag.Subject)
		}
		msg := diag.Summary
		if diag.Detail != "" {
			msg += ": " + diag.Detail
		}
		if kind == ErrSyntax {
			msg = "syntax error: " + msg
		}
		d.errs.add(pos, p.String(), kind, "%s", msg)
	}
}

// schema is what a block may hold.
type schema struct {
	attrs  []string
	blocks []hcl.BlockHeaderSchema
}

// content extracts what s describes from body, which is at p, and reports
// every other key as unknown, with the known key it was probably meant to
// be.
func (d *decoder) content(body hcl.Body, p path, s schema) *hcl.BodyContent {
	hs := &hcl.BodySchema{Blocks: s.blocks}
	isAttr, isBlock := map[string]bool{}, map[string]bool{}
	var known []string
	for _, a := range s.attrs {
		hs.Attributes = append(hs.Attributes, hcl.AttributeSchema{Name: a})
		isAttr[a] = true
		known = append(known, a)
	}
	for _, b := range s.blocks {
		isBlock[b.Type] = true
		known = append(known, b.Type)
	}
	content, remain, diags := body.PartialContent(hs)
	d.diags(diags, p, ErrWrongType)

	unknown := func(r hcl.Range, name string) {
		msg := "unknown key"
		if s := hclsrc.Suggest(name, known); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
			d.reported[p.f(s).String()] = true
		}
		d.errAt(r, p.f(name), ErrUnknownKey, "%s", msg)
	}
	// Native syntax tells arguments from blocks, so a block written as an
	// argument (or the reverse) gets its own message; JSON cannot tell them
	// apart, and what the schema does not claim is simply unknown.
	if sb, ok := body.(*hclsyntax.Body); ok {
		for name, a := range sb.Attributes {
			switch {
			case isAttr[name]:
			case isBlock[name]:
				d.errAt(a.NameRange, p.f(name), ErrWrongType, "block required, got argument (write %s { ... } without =)", name)
			default:
				unknown(a.NameRange, name)
			}
		}
		for _, b := range sb.Blocks {
			switch {
			case isBlock[b.Type]:
			case isAttr[b.Type]:
				d.errAt(b.TypeRange, p.f(b.Type), ErrWrongType, "argument required, got block (write %s = ...)", b.Type)
			default:
				unknown(b.TypeRange, b.Type)
			}
		}
		return content
	}
	rest, diags := remain.JustAttributes()
	d.diags(diags, p, ErrWrongType)
	for name, a := range rest {
		unknown(a.NameRange, name)
	}
	return content
}

// single returns the one block of type typ, reporting any further ones as
// duplicates; nil when there is none.
func (d *decoder) single(blocks hcl.Blocks, typ string, p path) *hcl.Block {
	var first *hcl.Block
	for _, b := range blocks.OfType(typ) {
		if first != nil {
			d.duplicate(first, b, p.f(typ), typ+" block")
			continue
		}
		first = b
		d.pos[p.f(typ).String()] = d.posOf(b.DefRange)
	}
	return first
}

// duplicate reports block dup as a second definition of first. In JSON
// both may come from one array under one key, and so share a position.
func (d *decoder) duplicate(first, dup *hcl.Block, p path, what string) {
	pos, firstPos := d.posOf(dup.DefRange), d.posOf(first.DefRange)
	if pos == firstPos {
		d.errs.add(pos, p.String(), ErrInvalidJob, "duplicate %s (a list of them is given; only one is allowed)", what)
		return
	}
	d.errs.add(pos, p.String(), ErrInvalidJob, "duplicate %s (first defined at %s)", what, firstPos)
}

// value evaluates an argument at p and records where it was written.
// Interpolations such as "${attr.kernel.name}" stay in the string as
// written: they are resolved on the node, not here. ok is false when
// evaluation failed (reported) or the value is null (unset).
func (d *decoder) value(a *hcl.Attribute, p path) (cty.Value, bool) {
	d.pos[p.String()] = d.posOf(a.NameRange)
	v, diags := d.literal(a.Expr)
	if diags.HasErrors() {
		d.diags(diags, p, ErrInvalidJob)
		return cty.NilVal, false
	}
	v, _ = v.UnmarkDeep()
	if !v.IsWhollyKnown() {
		d.errAt(a.Expr.Range(), p, ErrInvalidJob, "value cannot be known when the file is read")
		return cty.NilVal, false
	}
	return v, !v.IsNull()
}

// literal evaluates expr without variables or functions, keeping each
// ${...} interpolation of a template as its source text. JSON strings need
// no help: HCL's JSON syntax reads them verbatim without an EvalContext.
func (d *decoder) literal(expr hcl.Expression) (cty.Value, hcl.Diagnostics) {
	switch e := expr.(type) {
	case *hclsyntax.TemplateExpr:
		var diags hcl.Diagnostics
		s := ""
		for _, part := range e.Parts {
			if lit, ok := part.(*hclsyntax.LiteralValueExpr); ok && lit.Val.Type() == cty.String {
				s += lit.Val.AsString()
				continue
			}
			if src, ok := d.interpolation(part); ok {
				s += src
				continue
			}
			v, ds := d.literal(part)
			diags = append(diags, ds...)
			if ds.HasErrors() {
				continue
			}
			sv, err := convert.Convert(v, cty.String)
			if err != nil || sv.IsNull() {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid template interpolation value",
					Detail: "only strings, numbers and bools can be part of a string", Subject: part.Range().Ptr()})
				continue
			}
			s += sv.AsString()
		}
		return cty.StringVal(s), diags
	case *hclsyntax.TemplateWrapExpr:
		if src, ok := d.interpolation(e.Wrapped); ok {
			return cty.StringVal(src), nil
		}
		return d.literal(e.Wrapped)
	case *hclsyntax.TupleConsExpr:
		var diags hcl.Diagnostics
		vals := make([]cty.Value, 0, len(e.Exprs))
		for _, el := range e.Exprs {
			v, ds := d.literal(el)
			diags = append(diags, ds...)
			vals = append(vals, v)
		}
		if diags.HasErrors() {
			return cty.DynamicVal, diags
		}
		return cty.TupleVal(vals), nil
	case *hclsyntax.ObjectConsExpr:
		var diags hcl.Diagnostics
		attrs := map[string]cty.Value{}
		for _, item := range e.Items {
			k, ds := item.KeyExpr.Value(nil)
			diags = append(diags, ds...)
			v, ds2 := d.literal(item.ValueExpr)
			diags = append(diags, ds2...)
			if ds.HasErrors() || ds2.HasErrors() {
				continue
			}
			if k.IsNull() || !k.IsKnown() || k.Type() != cty.String {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid object key",
					Detail: "object keys must be strings", Subject: item.KeyExpr.Range().Ptr()})
				continue
			}
			attrs[k.AsString()] = v
		}
		if diags.HasErrors() {
			return cty.DynamicVal, diags
		}
		return cty.ObjectVal(attrs), nil
	}
	return expr.Value(nil)
}

// interpolation returns "${...}" with the source of e when e is a reference
// to a runtime value (attr.kernel.name, node.unique.name, BERTH_ALLOC_ID).
func (d *decoder) interpolation(e hclsyntax.Expression) (string, bool) {
	if _, ok := e.(*hclsyntax.ScopeTraversalExpr); !ok {
		return "", false
	}
	r := e.Range()
	if r.Start.Byte < 0 || r.End.Byte > len(d.src) || r.Start.Byte > r.End.Byte {
		return "", false
	}
	return "${" + string(d.src[r.Start.Byte:r.End.Byte]) + "}", true
}

// The conversions are strict on purpose, as in the agent config: a count
// written as "3" or a flag written as "true" is more likely a mistake than a
// convenience, and JSON and HCL agree on these types.

func (d *decoder) str(a *hcl.Attribute, p path) (string, bool) {
	v, ok := d.value(a, p)
	if !ok {
		return "", false
	}
	if v.Type() != cty.String {
		d.errAt(a.Expr.Range(), p, ErrWrongType, "string required, got %s", typeName(v.Type()))
		return "", false
	}
	return v.AsString(), true
}

func (d *decoder) boolean(a *hcl.Attribute, p path) (bool, bool) {
	v, ok := d.value(a, p)
	if !ok {
		return false, false
	}
	if v.Type() != cty.Bool {
		d.errAt(a.Expr.Range(), p, ErrWrongType, "bool required, got %s", typeName(v.Type()))
		return false, false
	}
	return v.True(), true
}

// integer reads a whole number that fits in an int32.
func (d *decoder) integer(a *hcl.Attribute, p path) (int64, bool) {
	v, ok := d.value(a, p)
	if !ok {
		return 0, false
	}
	n, err := wholeNumber(v)
	if err != nil {
		d.errAt(a.Expr.Range(), p, err.kind, "%s", err.msg)
		return 0, false
	}
	return n, true
}

// duration reads a duration string ("30s") as milliseconds.
func (d *decoder) duration(a *hcl.Attribute, p path) (int64, bool) {
	v, ok := d.value(a, p)
	if !ok {
		return 0, false
	}
	if v.Type() != cty.String {
		d.errAt(a.Expr.Range(), p, ErrWrongType, `duration string (like "30s") required, got %s`, typeName(v.Type()))
		return 0, false
	}
	s := v.AsString()
	dur, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.errAt(a.Expr.Range(), p, ErrInvalidJob, `invalid duration %q (want a number and a unit, like "500ms", "30s", "5m" or "1h")`, s)
		return 0, false
	case dur < 0:
		d.errAt(a.Expr.Range(), p, ErrInvalidJob, "must not be negative, got %s", s)
		return 0, false
	case dur%time.Millisecond != 0:
		d.errAt(a.Expr.Range(), p, ErrInvalidJob, "durations are kept in whole milliseconds, got %s", s)
		return 0, false
	}
	return dur.Milliseconds(), true
}

// stringList reads a list whose entries are strings (numbers and bools are
// taken as their text, as Nomad does).
func (d *decoder) stringList(a *hcl.Attribute, p path) ([]string, bool) {
	v, ok := d.value(a, p)
	if !ok {
		return nil, false
	}
	t := v.Type()
	if !t.IsListType() && !t.IsTupleType() && !t.IsSetType() {
		d.errAt(a.Expr.Range(), p, ErrWrongType, "list of strings required, got %s", typeName(t))
		return nil, false
	}
	out := make([]string, 0, v.LengthInt())
	for i, ev := range v.AsValueSlice() {
		s, err := primitiveText(ev)
		if err != nil {
			d.errAt(a.Expr.Range(), p.index(i), ErrWrongType, "%s", err.msg)
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// stringMap reads a block of string arguments (env, meta) or, in JSON, an
// object of strings. Numbers and bools are taken as their text.
func (d *decoder) stringMap(body hcl.Body, p path) map[string]string {
	attrs, diags := body.JustAttributes()
	d.diags(diags, p, ErrWrongType)
	out := make(map[string]string, len(attrs))
	for name, a := range attrs {
		v, ok := d.value(a, p.f(name))
		if !ok {
			continue
		}
		s, err := primitiveText(v)
		if err != nil {
			d.errAt(a.Expr.Range(), p.f(name), ErrWrongType, "%s", err.msg)
			continue
		}
		out[name] = s
	}
	return out
}

// valueError is a problem with one value, with its kind.
type valueError struct {
	kind error
	msg  string
}

// wholeNumber is v as a whole number that fits in an int32: every count,
// attempt and size of a job spec does.
func wholeNumber(v cty.Value) (int64, *valueError) {
	n, err := wholeNumber64(v)
	if err == nil && (n < math.MinInt32 || n > math.MaxInt32) {
		return 0, &valueError{ErrInvalidJob, fmt.Sprintf("%d is too large", n)}
	}
	return n, err
}

func wholeNumber64(v cty.Value) (int64, *valueError) {
	if v.Type() != cty.Number {
		return 0, &valueError{ErrWrongType, "whole number required, got " + typeName(v.Type())}
	}
	bf := v.AsBigFloat()
	if !bf.IsInt() {
		return 0, &valueError{ErrWrongType, "whole number required, got " + bf.Text('g', -1)}
	}
	n, acc := bf.Int64()
	if acc != big.Exact {
		return 0, &valueError{ErrInvalidJob, bf.Text('f', 0) + " is too large"}
	}
	return n, nil
}

// primitiveText is a string, number or bool as text.
func primitiveText(v cty.Value) (string, *valueError) {
	if v.IsNull() {
		return "", &valueError{ErrWrongType, "string required, got null"}
	}
	switch v.Type() {
	case cty.String:
		return v.AsString(), nil
	case cty.Number, cty.Bool:
		s, err := convert.Convert(v, cty.String)
		if err == nil {
			return s.AsString(), nil
		}
	}
	return "", &valueError{ErrWrongType, "string required, got " + typeName(v.Type())}
}

// typeName names a cty type the way a user writing HCL or JSON thinks of it.
func typeName(t cty.Type) string {
	switch {
	case t == cty.String:
		return "string"
	case t == cty.Number:
		return "number"
	case t == cty.Bool:
		return "bool"
	case t.IsListType(), t.IsTupleType(), t.IsSetType():
		return "list"
	case t.IsMapType(), t.IsObjectType():
		return "object"
	}
	return t.FriendlyName()
}
