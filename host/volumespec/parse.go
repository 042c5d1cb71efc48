package volumespec

import (
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
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
	d := newDecoder()
	body := d.source(filename, src)
	if body == nil {
		return nil, d.err("")
	}
	v := d.volume(body)
	Canonicalize(v)
	validate(v, mode, d.invalid)
	if err := d.err(v.GetId()); err != nil {
		return nil, err
	}
	return v, nil
}

// source parses src as a volume file (HCL, or HCL's JSON syntax for a
// ".json" filename) and records the root's position; nil, with the
// problem recorded, when it is not UTF-8 or does not parse.
func (d *decoder) source(filename string, src []byte) hcl.Body {
	if !utf8.Valid(src) {
		d.Errs.Add(Pos{File: filename, Line: 1, Column: 1}, "", ErrSyntax, "syntax error: the file is not valid UTF-8")
		return nil
	}
	body := d.Parse(filename, src, "volume file")
	if body != nil {
		d.pos[""] = Pos{File: filename, Line: 1, Column: 1}
	}
	return body
}

// invalid records a validation problem at path, unless decoding reported
// one there already.
func (d *decoder) invalid(path, format string, args ...any) {
	if d.Reported[path] {
		return
	}
	d.Errs.Add(d.posOf(path), path, ErrInvalidVolume, format, args...)
}

// style is how the volume spec words its problems (see hclsrc.Style).
var style = hclsrc.Style{
	FirstAt: "first at",
	Required: func(want string, got cty.Type) string {
		return fmt.Sprintf("a %s is required, got %s", want, got.FriendlyName())
	},
}

var kinds = hclsrc.Kinds{
	Syntax:     ErrSyntax,
	UnknownKey: ErrUnknownKey,
	WrongType:  ErrWrongType,
	Invalid:    ErrInvalidVolume,
	Duplicate:  ErrInvalidVolume,
}

// decoder turns one parsed file into a volume with hclsrc's kit,
// collecting every problem and recording where each field was written
// (pos, which is the kit's Where).
type decoder struct {
	hclsrc.Decoder
	pos map[string]Pos
}

func newDecoder() *decoder {
	d := &decoder{pos: map[string]Pos{}}
	d.Kinds, d.Style, d.Where = kinds, style, d.pos
	// Reported are paths already reported while decoding, so validation
	// does not add "is required" about a value it could not read.
	d.Reported, d.DiagsReported = map[string]bool{}, true
	return d
}

// err returns the problems about the volume with the given ID as *Errors,
// sorted by position, or nil.
func (d *decoder) err(volume string) error { return (&Errors{Volume: volume, Errs: d.Errs}).err() }

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

func (d *decoder) content(body hcl.Body, path string, attrs, blocks []string) *hcl.BodyContent {
	return d.Content(body, hclsrc.FieldPath(path), hclsrc.Schema{Attrs: attrs, Blocks: hclsrc.Blocks(blocks...)})
}

func (d *decoder) single(blocks hcl.Blocks, typ, path string) *hcl.Block {
	return d.Single(blocks, typ, hclsrc.FieldPath(path))
}

func (d *decoder) str(a *hcl.Attribute, path string) (string, bool) {
	return hclsrc.Read(&d.Decoder, a, hclsrc.FieldPath(path), d.Style.String)
}

func (d *decoder) errAt(r hcl.Range, path string, kind error, format string, args ...any) {
	d.ErrAt(r, hclsrc.FieldPath(path), kind, format, args...)
}

func (d *decoder) strings(a *hcl.Attribute, path string) []string {
	vals, ok := hclsrc.Read(&d.Decoder, a, hclsrc.FieldPath(path), d.Style.List)
	if !ok {
		return nil
	}
	var out []string
	for i, e := range vals {
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
		d.Diags(diags, hclsrc.FieldPath(path), ErrWrongType)
		return nil
	}
	out := map[string]string{}
	for name, a := range attrs {
		if s, ok := d.str(a, hclsrc.FieldPath(path).Field(name).String()); ok {
			out[name] = s
		}
	}
	return out
}
