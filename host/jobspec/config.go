package jobspec

import (
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"berth.dev/berth/internal/hclsrc"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// A task's config block belongs to its driver, whose schema berth may not
// know when the file is read; driverConfig keeps every key as a typed
// ConfigValue (the kinds a driver schema has: string, int, bool, list of
// strings, map of strings), and the driver checks (WithDrivers,
// ValidateDrivers) hold it against the schema. A nested block without
// labels is a map of strings, as in Nomad's `port_map { http = 8080 }`.
func (d *decoder) driverConfig(body hcl.Body, p path) map[string]*driverpb.ConfigValue {
	out := map[string]*driverpb.ConfigValue{}
	sb, native := body.(*hclsyntax.Body)
	if !native {
		attrs, diags := body.JustAttributes()
		d.Diags(diags, p, ErrWrongType)
		for name, a := range attrs {
			if v := d.configValue(a, p.f(name)); v != nil {
				out[name] = v
			}
		}
		return out
	}
	for name, a := range sb.Attributes {
		if v := d.configValue(a.AsHCLAttribute(), p.f(name)); v != nil {
			out[name] = v
		}
	}
	seen := map[string]*hclsyntax.Block{}
	for _, b := range sb.Blocks {
		bp := p.f(b.Type)
		d.pos[bp.String()] = d.Pos(b.TypeRange)
		switch {
		case len(b.Labels) > 0:
			d.ErrAt(b.LabelRanges[0], bp, ErrWrongType, "a config block holds no labelled blocks (write %s { key = \"value\" })", b.Type)
			continue
		case sb.Attributes[b.Type] != nil:
			d.ErrAt(b.TypeRange, bp, ErrInvalidJob, "set both as an argument (at %s) and as a block", d.Pos(sb.Attributes[b.Type].NameRange))
			continue
		case seen[b.Type] != nil:
			d.ErrAt(b.TypeRange, bp, ErrInvalidJob, "duplicate %s block (first defined at %s)", b.Type, d.Pos(seen[b.Type].TypeRange))
			continue
		}
		seen[b.Type] = b
		m := d.StringMap(b.Body, bp)
		// stringMap recorded the keys' own positions; the block's is wanted
		// for errors about the whole value.
		d.pos[bp.String()] = d.Pos(b.TypeRange)
		out[b.Type] = sdk.MapValue(m)
	}
	return out
}

// configValue converts one config argument; nil when it is null (unset) or
// was reported.
func (d *decoder) configValue(a *hcl.Attribute, p path) *driverpb.ConfigValue {
	v, ok := d.Value(a, p)
	if !ok {
		return nil
	}
	t := v.Type()
	switch {
	case t == cty.String:
		return sdk.StringValue(v.AsString())
	case t == cty.Bool:
		return sdk.BoolValue(v.True())
	case t == cty.Number:
		n, err := d.Style.Int64(v)
		if err != nil {
			d.Fail(a.Expr.Range(), p, err)
			return nil
		}
		return sdk.IntValue(n)
	case t.IsListType(), t.IsTupleType(), t.IsSetType():
		list := make([]string, 0, v.LengthInt())
		for i, ev := range v.AsValueSlice() {
			s, err := d.Style.Text(ev)
			if err != nil {
				d.ErrAt(a.Expr.Range(), p.index(i), kinds.Of(err), "%s (a config list holds strings)", err)
				return nil
			}
			list = append(list, s)
		}
		return sdk.ListValue(list...)
	case t.IsMapType(), t.IsObjectType():
		m := make(map[string]string, v.LengthInt())
		for k, ev := range v.AsValueMap() {
			s, err := d.Style.Text(ev)
			if err != nil {
				d.ErrAt(a.Expr.Range(), p.f(k), kinds.Of(err), "%s (a config map holds strings)", err)
				return nil
			}
			m[k] = s
		}
		return sdk.MapValue(m)
	}
	d.ErrAt(a.Expr.Range(), p, ErrWrongType, "unsupported value of type %s", hclsrc.TypeName(t))
	return nil
}
