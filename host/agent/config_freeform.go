package agent

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"berth.dev/berth/internal/hclsrc"
)

// A plugin's config body has no schema berth knows; the plugin validates it
// when it is loaded. freeform turns the body into JSON-compatible values the
// way HCL's JSON syntax spells the same body, so a config means the same in
// either syntax:
//
//	a = 1                 "a": 1
//	b { x = 1 }           "b": {"x": 1}
//	b { x = 1 } b { }     "b": [{"x": 1}, {}]
//	c "l" { x = 1 }       "c": {"l": {"x": 1}}

func (d *decoder) freeform(body hcl.Body, path string) map[string]any {
	out := map[string]any{}
	sb, ok := body.(*hclsyntax.Body)
	if !ok {
		attrs, diags := body.JustAttributes()
		d.Diags(diags, hclsrc.FieldPath(path), ErrWrongType)
		for name, a := range attrs {
			d.freeformAttr(out, path, name, a)
		}
		return out
	}

	for name, a := range sb.Attributes {
		d.freeformAttr(out, path, name, a.AsHCLAttribute())
	}

	// Group blocks by type, then by their labels, keeping file order.
	var types []string
	byType := map[string][]*hclsyntax.Block{}
	for _, b := range sb.Blocks {
		if _, seen := byType[b.Type]; !seen {
			types = append(types, b.Type)
		}
		byType[b.Type] = append(byType[b.Type], b)
	}
	for _, typ := range types {
		blocks := byType[typ]
		bpath := path + "." + typ
		if a, clash := sb.Attributes[typ]; clash {
			d.Errs.Add(d.Pos(blocks[0].TypeRange), bpath, ErrDuplicateBlock,
				"set both as an argument (at %s) and as a block", d.Pos(a.NameRange))
			continue
		}
		if n := len(blocks[0].Labels); slices.ContainsFunc(blocks, func(b *hclsyntax.Block) bool { return len(b.Labels) != n }) {
			d.Errs.Add(d.Pos(blocks[0].TypeRange), bpath, ErrWrongType,
				"%s blocks must all have the same number of labels", typ)
			continue
		}
		var order [][]string
		bodies := map[string][]any{}
		for _, b := range blocks {
			keys := append([]string{typ}, b.Labels...)
			k := strings.Join(keys, "\x00")
			if _, seen := bodies[k]; !seen {
				order = append(order, keys)
			}
			bodies[k] = append(bodies[k], d.freeform(b.Body, path+"."+strings.Join(keys, ".")))
		}
		for _, keys := range order {
			vals := bodies[strings.Join(keys, "\x00")]
			var v any = vals
			if len(vals) == 1 {
				v = vals[0]
			}
			m := out
			for _, k := range keys[:len(keys)-1] {
				next, ok := m[k].(map[string]any)
				if !ok {
					next = map[string]any{}
					m[k] = next
				}
				m = next
			}
			m[keys[len(keys)-1]] = v
		}
	}
	return out
}

func (d *decoder) freeformAttr(out map[string]any, path, name string, a *hcl.Attribute) {
	apath := path + "." + name
	v, ok := d.Eval(a, hclsrc.FieldPath(apath))
	if !ok {
		return
	}
	g, err := ctyToGo(v)
	if err != nil {
		d.Fail(a.Expr.Range(), hclsrc.FieldPath(apath), err)
		return
	}
	out[name] = g
}

// ctyToGo converts a known value into string, bool, int64 (whole numbers
// that fit), float64, nil, []any or map[string]any.
func ctyToGo(v cty.Value) (any, error) {
	if v.IsNull() {
		return nil, nil
	}
	t := v.Type()
	switch {
	case t == cty.String:
		return v.AsString(), nil
	case t == cty.Bool:
		return v.True(), nil
	case t == cty.Number:
		bf := v.AsBigFloat()
		if bf.IsInt() {
			if n, acc := bf.Int64(); acc == big.Exact {
				return n, nil
			}
		}
		f, _ := bf.Float64()
		if math.IsInf(f, 0) {
			return nil, invalidf("number %s is too large", hclsrc.NumberText(bf))
		}
		return f, nil
	case t.IsListType(), t.IsTupleType(), t.IsSetType():
		out := make([]any, 0, v.LengthInt())
		for i, ev := range v.AsValueSlice() {
			g, err := ctyToGo(ev)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out = append(out, g)
		}
		return out, nil
	case t.IsMapType(), t.IsObjectType():
		out := make(map[string]any, v.LengthInt())
		for k, ev := range v.AsValueMap() {
			g, err := ctyToGo(ev)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = g
		}
		return out, nil
	default:
		return nil, &hclsrc.ValueError{Class: hclsrc.WrongType, Msg: "unsupported value of type " + t.FriendlyName()}
	}
}
