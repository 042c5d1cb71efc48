package hclsrc

import (
	"fmt"
	"math/big"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// Eval evaluates an argument at p and records where it was written (when
// d.Where is set). Expressions may compute (1 + 1, "a${"b"}") but not refer
// to variables or call functions: there are none; with Style.Templates,
// references inside strings are kept as written. ok is false when
// evaluation failed, which has been reported; a null value is ok.
func (d *Decoder) Eval(a *hcl.Attribute, p Path) (cty.Value, bool) {
	if d.Where != nil {
		d.Where[p.String()] = d.Pos(a.NameRange)
	}
	var v cty.Value
	var diags hcl.Diagnostics
	if d.Style.Templates {
		v, diags = d.literal(a.Expr)
	} else {
		v, diags = a.Expr.Value(nil)
	}
	if diags.HasErrors() {
		d.Diags(diags, p, d.Kinds.Invalid)
		return cty.NilVal, false
	}
	v, _ = v.UnmarkDeep()
	if !v.IsWhollyKnown() {
		d.ErrAt(a.Expr.Range(), p, d.Kinds.Invalid, "value cannot be known when the file is read")
		return cty.NilVal, false
	}
	return v, true
}

// Value is Eval for a value that must be set: ok is also false when it is
// null, which leaves the key unset.
func (d *Decoder) Value(a *hcl.Attribute, p Path) (cty.Value, bool) {
	v, ok := d.Eval(a, p)
	return v, ok && !v.IsNull()
}

// Read evaluates an argument at p and converts it with conv (one of the
// Style conversions, or a reader's own), reporting a failure at the value.
// ok is false when the value is null or was reported.
func Read[T any](d *Decoder, a *hcl.Attribute, p Path, conv func(cty.Value) (T, error)) (T, bool) {
	var zero T
	v, ok := d.Value(a, p)
	if !ok {
		return zero, false
	}
	t, err := conv(v)
	if err != nil {
		d.Fail(a.Expr.Range(), p, err)
		return zero, false
	}
	return t, true
}

// StringList reads a list whose entries are strings; numbers and bools are
// taken as their text, as Nomad does (see Style.Text).
func (d *Decoder) StringList(a *hcl.Attribute, p Path) ([]string, bool) {
	vals, ok := Read(d, a, p, d.Style.List)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(vals))
	for i, ev := range vals {
		s, err := d.Style.Text(ev)
		if err != nil {
			d.Fail(a.Expr.Range(), p.Index(i), err)
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// StringMap reads a block of string arguments (env, meta) or, in JSON, an
// object of strings. Numbers and bools are taken as their text.
func (d *Decoder) StringMap(body hcl.Body, p Path) map[string]string {
	attrs, diags := body.JustAttributes()
	d.Diags(diags, p, d.Kinds.WrongType)
	out := make(map[string]string, len(attrs))
	for name, a := range attrs {
		if s, ok := Read(d, a, p.Field(name), d.Style.Text); ok {
			out[name] = s
		}
	}
	return out
}

// literal evaluates expr without variables or functions, keeping each
// ${...} interpolation of a template as its source text. JSON strings need
// no help: HCL's JSON syntax reads them verbatim without an EvalContext.
func (d *Decoder) literal(expr hcl.Expression) (cty.Value, hcl.Diagnostics) {
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
			text, err := d.Style.Text(v)
			if err != nil {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid template interpolation value",
					Detail: err.Error() + " (only strings, numbers and bools can be part of a string)", Subject: part.Range().Ptr()})
				continue
			}
			s += text
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
func (d *Decoder) interpolation(e hclsyntax.Expression) (string, bool) {
	if _, ok := e.(*hclsyntax.ScopeTraversalExpr); !ok {
		return "", false
	}
	r := e.Range()
	if r.Start.Byte < 0 || r.End.Byte > len(d.src) || r.Start.Byte > r.End.Byte {
		return "", false
	}
	return "${" + string(d.src[r.Start.Byte:r.End.Byte]) + "}", true
}

// The conversions below are strict on purpose: a port written as "7646" or
// a flag written as "true" is more likely a mistake than a convenience, and
// JSON and HCL agree on these types. Each returns a *ValueError.

// WrongType is the error for v where a want belongs ("string", "list of
// strings"), in the Style's words.
func (s *Style) WrongType(want string, v cty.Value) error {
	msg := want + " required, got null"
	switch {
	case v.IsNull():
	case s.Required != nil:
		msg = s.Required(want, v.Type())
	default:
		msg = want + " required, got " + TypeName(v.Type())
	}
	return &ValueError{Class: WrongType, Msg: msg}
}

// String reads a string.
func (s *Style) String(v cty.Value) (string, error) {
	if v.IsNull() || v.Type() != cty.String {
		return "", s.WrongType("string", v)
	}
	return v.AsString(), nil
}

// Bool reads a bool.
func (s *Style) Bool(v cty.Value) (bool, error) {
	if v.IsNull() || v.Type() != cty.Bool {
		return false, s.WrongType("bool", v)
	}
	return v.True(), nil
}

// whole reads a whole number, not yet fitted to a Go type.
func (s *Style) whole(v cty.Value) (*big.Float, error) {
	if v.IsNull() || v.Type() != cty.Number {
		return nil, s.WrongType("whole number", v)
	}
	bf := v.AsBigFloat()
	if !bf.IsInt() {
		return nil, &ValueError{Class: WrongType, Msg: "whole number required, got " + NumberText(bf)}
	}
	return bf, nil
}

// Int64 reads a whole number that fits in an int64.
func (s *Style) Int64(v cty.Value) (int64, error) {
	bf, err := s.whole(v)
	if err != nil {
		return 0, err
	}
	n, acc := bf.Int64()
	if acc != big.Exact {
		return 0, Invalidf("%s is too large", NumberText(bf))
	}
	return n, nil
}

// IntIn reads a whole number from lo to hi (an int32, an int); one outside
// is "too large", whichever side it is on.
func (s *Style) IntIn(v cty.Value, lo, hi int64) (int64, error) {
	n, err := s.Int64(v)
	if err == nil && (n < lo || n > hi) {
		return 0, Invalidf("%d is too large", n)
	}
	return n, err
}

// Uint64 reads a whole number that is not negative and fits in a uint64.
func (s *Style) Uint64(v cty.Value) (uint64, error) {
	bf, err := s.whole(v)
	if err != nil {
		return 0, err
	}
	if bf.Sign() < 0 {
		return 0, Invalidf("must not be negative, got %s", NumberText(bf))
	}
	n, acc := bf.Uint64()
	if acc != big.Exact {
		return 0, Invalidf("%s is too large", NumberText(bf))
	}
	return n, nil
}

// Duration reads a duration string ("30s"), as time.ParseDuration does.
func (s *Style) Duration(v cty.Value) (time.Duration, error) {
	ex := s.Durations
	if v.IsNull() || v.Type() != cty.String {
		return 0, s.WrongType(fmt.Sprintf("duration string (like %q)", ex[1]), v)
	}
	str := v.AsString()
	d, err := time.ParseDuration(str)
	if err != nil {
		return 0, &ValueError{
			Class: Invalid,
			Msg:   fmt.Sprintf("invalid duration %q (want a number and a unit, like %q, %q, %q or %q)", str, ex[0], ex[1], ex[2], ex[3]),
			Cause: err,
		}
	}
	return d, nil
}

// List reads a list (or tuple) as its entries.
func (s *Style) List(v cty.Value) ([]cty.Value, error) {
	t := v.Type()
	if v.IsNull() || !t.IsListType() && !t.IsTupleType() && !t.IsSetType() {
		return nil, s.WrongType("list of strings", v)
	}
	return v.AsValueSlice(), nil
}

// Text reads a string, number or bool as text, for values that are strings
// but often written unquoted (versions, ports in env).
func (s *Style) Text(v cty.Value) (string, error) {
	if v.IsNull() {
		return "", &ValueError{Class: WrongType, Msg: "string required, got null"}
	}
	switch v.Type() {
	case cty.String:
		return v.AsString(), nil
	case cty.Number:
		// Spelling out 1e9999999 would take seconds and megabytes; no
		// sensible value is that large or that small.
		if exp := v.AsBigFloat().MantExp(nil); exp > maxPrintedExp || exp < -maxPrintedExp {
			return "", Invalidf("number %s is out of range", NumberText(v.AsBigFloat()))
		}
		fallthrough
	case cty.Bool:
		str, err := convert.Convert(v, cty.String)
		if err == nil {
			return str.AsString(), nil
		}
	}
	return "", &ValueError{Class: WrongType, Msg: "string required, got " + TypeName(v.Type())}
}

// TypeName names a cty type the way a user writing HCL or JSON thinks of it.
func TypeName(t cty.Type) string {
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
