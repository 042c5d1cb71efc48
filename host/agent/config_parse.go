package agent

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"

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
	var file *hcl.File
	var diags hcl.Diagnostics
	if isJSONFile(filename) {
		// HCL's JSON syntax also allows an array of objects at the root;
		// berth does not, so that unknown keys can be found in one object.
		if p, ok := hclsrc.JSONRootArray(src); ok {
			d.errs.addUnprefixed(SourcePos{File: filename, Line: p.Line, Column: p.Column}, "", ErrWrongType,
				"the root of a JSON configuration must be an object, not an array")
			return nil, d.errs
		}
		file, diags = hcljson.Parse(src, filename)
		diags = hclsrc.DropRootEcho(src, diags)
	} else {
		split, ls := hclsrc.SplitCompact(src, filename)
		d.split = ls
		file, diags = hclsyntax.ParseConfig(split, filename, hcl.InitialPos)
	}
	if diags.HasErrors() {
		d.diags(diags, "", ErrSyntax)
		return nil, d.sorted()
	}
	c := &Config{Plugins: map[string]*PluginConfig{}, set: map[string]SourcePos{}}
	d.file(file.Body, c)
	if len(d.errs) > 0 {
		return nil, d.sorted()
	}
	return c, nil
}

func isJSONFile(name string) bool {
	return strings.EqualFold(filepath.Ext(name), ".json")
}

// decoder turns one parsed file into a Config, collecting every problem
// instead of stopping at the first.
type decoder struct {
	errs  ConfigErrors
	split *hclsrc.LineSplit // non-nil when hclsrc.SplitCompact changed the source
}

func (d *decoder) posOf(r hcl.Range) SourcePos {
	p := r.Start
	if d.split != nil {
		p = d.split.Pos(p)
	}
	return SourcePos{File: r.Filename, Line: p.Line, Column: p.Column}
}

// diags records HCL's own diagnostics, which it phrases as a summary and a
// detail sentence, both worth keeping.
func (d *decoder) diags(diags hcl.Diagnostics, path string, kind error) {
	for _, diag := range diags {
		if diag.Severity != hcl.DiagError {
			continue
		}
		var pos SourcePos
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
		d.errs.add(pos, path, kind, "%s", msg)
	}
}

// sorted returns the errors in the order they appear in the file.
func (d *decoder) sorted() ConfigErrors {
	slices.SortStableFunc(d.errs, func(a, b *ConfigError) int {
		return cmp.Or(cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Column, b.Pos.Column))
	})
	return d.errs
}

var pluginBlockSchema = hcl.BlockHeaderSchema{Type: "plugin", LabelNames: []string{"name"}}

func (d *decoder) file(body hcl.Body, c *Config) {
	blocks := []hcl.BlockHeaderSchema{pluginBlockSchema}
	for _, b := range configBlocks {
		blocks = append(blocks, hcl.BlockHeaderSchema{Type: b.key})
	}
	content := d.content(body, "", "", topAttrs, blocks)
	d.attrs(content, "", topAttrs, c)
	for _, def := range configBlocks {
		b := d.single(content.Blocks, def.key, def.key)
		if b == nil {
			continue
		}
		inner := d.content(b.Body, def.key+" block", def.key+".", def.attrs, nil)
		d.attrs(inner, def.key+".", def.attrs, c)
	}
	d.plugins(content.Blocks, c)
}

// content extracts what the schema describes from body and reports every
// other key as unknown, naming the block it is in ("server block"; empty
// for the top level).
func (d *decoder) content(body hcl.Body, where, prefix string, attrs []attrDef, blocks []hcl.BlockHeaderSchema) *hcl.BodyContent {
	schema := &hcl.BodySchema{Blocks: blocks}
	for _, a := range attrs {
		schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: a.key})
	}
	content, remain, diags := body.PartialContent(schema)
	d.diags(diags, strings.TrimSuffix(prefix, "."), ErrWrongType)
	d.unknownKeys(body, remain, schema, where, prefix)
	return content
}

func (d *decoder) unknownKeys(body, remain hcl.Body, schema *hcl.BodySchema, where, prefix string) {
	isAttr := map[string]bool{}
	isBlock := map[string]bool{}
	var known []string
	for _, a := range schema.Attributes {
		isAttr[a.Name] = true
		known = append(known, a.Name)
	}
	for _, b := range schema.Blocks {
		isBlock[b.Type] = true
		known = append(known, b.Type)
	}
	unknown := func(r hcl.Range, name string) {
		msg := fmt.Sprintf("unknown key %q", name)
		if where != "" {
			msg += " in " + where
		}
		if s := hclsrc.Suggest(name, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		d.errs.addUnprefixed(d.posOf(r), prefix+name, ErrUnknownKey, "%s", msg)
	}

	// Native syntax tells arguments from blocks, so a block written as an
	// argument (or the reverse) gets its own message; JSON cannot tell them
	// apart, and what the schema does not claim is simply unknown.
	if sb, ok := body.(*hclsyntax.Body); ok {
		for name, a := range sb.Attributes {
			switch {
			case isAttr[name]:
			case isBlock[name]:
				d.errs.add(d.posOf(a.NameRange), prefix+name, ErrWrongType,
					"block required, got argument (write %s { ... } without =)", name)
			default:
				unknown(a.NameRange, name)
			}
		}
		for _, b := range sb.Blocks {
			switch {
			case isBlock[b.Type]:
			case isAttr[b.Type]:
				d.errs.add(d.posOf(b.TypeRange), prefix+b.Type, ErrWrongType,
					"argument required, got block (write %s = ...)", b.Type)
			default:
				unknown(b.TypeRange, b.Type)
			}
		}
		return
	}
	rest, diags := remain.JustAttributes()
	d.diags(diags, strings.TrimSuffix(prefix, "."), ErrWrongType)
	for name, a := range rest {
		unknown(a.NameRange, name)
	}
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
			c.set[path] = d.posOf(a.Expr.Range())
		}
	}
}

// single returns the one block of type typ, reporting any further ones as
// duplicates; nil when there is none.
func (d *decoder) single(blocks hcl.Blocks, typ, path string) *hcl.Block {
	var first *hcl.Block
	for _, b := range blocks {
		if b.Type != typ {
			continue
		}
		if first != nil {
			d.duplicate(first, b, path, typ+" block")
			continue
		}
		first = b
	}
	return first
}

// duplicate reports block dup as a second definition of first. In JSON
// both may come from one array under one key, and so share a position.
func (d *decoder) duplicate(first, dup *hcl.Block, path, what string) {
	pos, firstPos := d.posOf(dup.TypeRange), d.posOf(first.TypeRange)
	if pos == firstPos {
		d.errs.addUnprefixed(pos, path, ErrDuplicateBlock, "duplicate %s (a list of them is given; only one is allowed)", what)
		return
	}
	d.errs.addUnprefixed(pos, path, ErrDuplicateBlock, "duplicate %s (first defined at %s)", what, firstPos)
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
			d.errs.add(d.posOf(b.LabelRanges[0]), "plugin", ErrInvalidValue, "a plugin block needs a name")
			continue
		case first[name] != nil:
			d.duplicate(first[name], b, path, fmt.Sprintf("plugin %q block", name))
			continue
		}
		first[name] = b
		where := fmt.Sprintf("plugin %q block", name)
		content := d.content(b.Body, where, path+".", []attrDef{{key: "type"}}, []hcl.BlockHeaderSchema{{Type: "config"}})
		cfg := map[string]any{}
		if cb := d.single(content.Blocks, "config", path+".config"); cb != nil {
			cfg = d.freeform(cb.Body, path+".config")
		}
		typ := d.pluginType(content.Attributes["type"], path+".type")
		pos := d.posOf(b.DefRange)
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
	v, ok := d.value(path, a)
	if !ok || v.IsNull() {
		return ""
	}
	s, err := toString(v)
	if err != nil {
		d.errs.add(d.posOf(a.Expr.Range()), path, ErrWrongType, "%v", err)
		return ""
	}
	switch s {
	case PluginTypeDriver, PluginTypeCSI:
		return s
	}
	d.errs.add(d.posOf(a.Expr.Range()), path, ErrInvalidValue, "plugin type %q: want %q (a task driver, the default) or %q (a CSI storage adapter)",
		s, PluginTypeDriver, PluginTypeCSI)
	return ""
}

// value evaluates an argument. Expressions may compute (1 + 1, "a${"b"}")
// but not refer to variables or call functions: there are none. ok is
// false when evaluation failed, which has been reported.
func (d *decoder) value(path string, a *hcl.Attribute) (cty.Value, bool) {
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		d.diags(diags, path, ErrInvalidValue)
		return cty.NilVal, false
	}
	v, _ = v.UnmarkDeep()
	if !v.IsWhollyKnown() {
		d.errs.add(d.posOf(a.Expr.Range()), path, ErrInvalidValue, "value cannot be known when the file is read")
		return cty.NilVal, false
	}
	return v, true
}
