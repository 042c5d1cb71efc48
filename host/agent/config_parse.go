package agent

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"berth.dev/berth/internal/hclsrc"
)

// ParseConfig parses one configuration file: HCL, or HCL's JSON syntax when
// filename ends in ".json". filename also names the file in error messages.
//
// The result holds only what the file sets; every other field is zero. Merge
// it onto DefaultConfig (LoadConfigFiles does) and Validate the result. On
// failure the error is ConfigErrors, one entry per problem.
func ParseConfig(filename string, src []byte) (*Config, error) {
	d := &decoder{}
	d.Kinds, d.Style = configKinds, configStyle
	body := d.Parse(filename, src, "configuration")
	if body == nil {
		d.Errs.Sort()
		return nil, d.Errs
	}
	c := &Config{Plugins: map[string]*PluginConfig{}, set: map[string]SourcePos{}}
	d.file(body, c)
	if len(d.Errs) > 0 {
		d.Errs.Sort()
		return nil, d.Errs
	}
	return c, nil
}

// decoder turns one parsed file into a Config with hclsrc's kit,
// collecting every problem instead of stopping at the first.
type decoder struct {
	hclsrc.Decoder
}

var pluginBlockSchema = hcl.BlockHeaderSchema{Type: "plugin", LabelNames: []string{"name"}}

func (d *decoder) file(body hcl.Body, c *Config) {
	blocks := []hcl.BlockHeaderSchema{pluginBlockSchema}
	for _, b := range configBlocks {
		blocks = append(blocks, hcl.BlockHeaderSchema{Type: b.key})
	}
	content := d.Content(body, hclsrc.FieldPath(""), hclsrc.Schema{Attrs: keys(topAttrs), Blocks: blocks})
	d.attrs(content, "", topAttrs, c)
	for _, def := range configBlocks {
		b := d.Single(content.Blocks, def.key, hclsrc.FieldPath(""))
		if b == nil {
			continue
		}
		schema := hclsrc.Schema{Attrs: keys(def.attrs), In: def.key + " block"}
		if def.key == "client" {
			schema.Blocks = []hcl.BlockHeaderSchema{hostVolumeBlockSchema}
		}
		inner := d.Content(b.Body, hclsrc.FieldPath(def.key), schema)
		d.attrs(inner, def.key+".", def.attrs, c)
		if def.key == "client" {
			d.hostVolumes(inner.Blocks, c)
		}
	}
	d.plugins(content.Blocks, c)
}

func keys(defs []attrDef) []string {
	out := make([]string, len(defs))
	for i, def := range defs {
		out[i] = def.key
	}
	return out
}

// attrs decodes the arguments in content, recording where each was set.
func (d *decoder) attrs(content *hcl.BodyContent, prefix string, defs []attrDef, c *Config) {
	for _, def := range defs {
		a := content.Attributes[def.key]
		if a == nil {
			continue
		}
		path := prefix + def.key
		if def.decode(d, path, a, c) {
			c.set[path] = d.Pos(a.Expr.Range())
		}
	}
}

func (d *decoder) plugins(blocks hcl.Blocks, c *Config) {
	first := map[string]*hcl.Block{}
	for _, b := range blocks {
		if b.Type != pluginBlockSchema.Type {
			continue
		}
		name := b.Labels[0]
		path := "plugin." + name
		switch {
		case name == "":
			d.Errs.Add(d.Pos(b.LabelRanges[0]), "plugin", ErrInvalidValue, "a plugin block needs a name")
			continue
		case first[name] != nil:
			d.Duplicate(first[name], b, hclsrc.FieldPath(path), fmt.Sprintf("plugin %q block", name))
			continue
		}
		first[name] = b
		content := d.Content(b.Body, hclsrc.FieldPath(path), hclsrc.Schema{
			Attrs: []string{"type"}, Blocks: hclsrc.Blocks("config"), In: fmt.Sprintf("plugin %q block", name),
		})
		cfg := map[string]any{}
		if cb := d.Single(content.Blocks, "config", hclsrc.FieldPath(path)); cb != nil {
			cfg = d.freeform(cb.Body, path+".config")
		}
		typ := d.pluginType(content.Attributes["type"], path+".type")
		pos := d.Pos(b.DefRange)
		c.set[path] = pos
		c.Plugins[name] = &PluginConfig{Name: name, Type: typ, Config: cfg, Source: fmt.Sprintf("%s:%d", pos.File, pos.Line)}
	}
}

// pluginType reads a plugin block's type: "driver" (also when absent) or
// "csi" (a storage adapter).
func (d *decoder) pluginType(a *hcl.Attribute, path string) string {
	if a == nil {
		return ""
	}
	s, ok := hclsrc.Read(&d.Decoder, a, hclsrc.FieldPath(path), configStyle.String)
	if !ok {
		return ""
	}
	switch s {
	case PluginTypeDriver, PluginTypeCSI:
		return s
	}
	d.Errs.Add(d.Pos(a.Expr.Range()), path, ErrInvalidValue, "plugin type %q: want %q (a task driver, the default) or %q (a CSI storage adapter)",
		s, PluginTypeDriver, PluginTypeCSI)
	return ""
}
