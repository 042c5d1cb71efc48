package jobspec

import (
	"math"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"berth.dev/berth/internal/hclsrc"
)

// style is how the job spec words its problems and reads its values (see
// hclsrc.Style): references to runtime values stay in strings as written.
var style = hclsrc.Style{
	Templates: true,
	Durations: [4]string{"500ms", "30s", "5m", "1h"},
}

// decoder turns one parsed file into a job with hclsrc's kit, collecting
// every problem instead of stopping at the first, and recording where each
// field was written (pos, which is the kit's Where).
type decoder struct {
	hclsrc.Decoder
	pos positions
}

func newDecoder() *decoder {
	d := &decoder{pos: positions{}}
	d.Kinds, d.Style, d.Where = kinds, style, d.pos
	// reported are paths already reported while decoding (a value of the
	// wrong type, or the key a misspelt one was probably meant to be), so
	// that validation does not add "required" or "must be positive" about
	// the same field.
	d.Reported = map[string]bool{}
	return d
}

// The typed values are hclsrc's, strict on purpose: a count written as "3"
// or a flag written as "true" is more likely a mistake than a convenience.

func (d *decoder) str(a *hcl.Attribute, p path) (string, bool) {
	return hclsrc.Read(&d.Decoder, a, p, d.Style.String)
}

func (d *decoder) boolean(a *hcl.Attribute, p path) (bool, bool) {
	return hclsrc.Read(&d.Decoder, a, p, d.Style.Bool)
}

// integer reads a whole number that fits in an int32: every count, attempt
// and size of a job spec does.
func (d *decoder) integer(a *hcl.Attribute, p path) (int64, bool) {
	return hclsrc.Read(&d.Decoder, a, p, wholeNumber)
}

func wholeNumber(v cty.Value) (int64, error) { return style.IntIn(v, math.MinInt32, math.MaxInt32) }

// duration reads a duration string ("30s") as milliseconds.
func (d *decoder) duration(a *hcl.Attribute, p path) (int64, bool) {
	return hclsrc.Read(&d.Decoder, a, p, millis)
}

func millis(v cty.Value) (int64, error) {
	dur, err := style.Duration(v)
	if err != nil {
		return 0, err
	}
	switch s := v.AsString(); {
	case dur < 0:
		return 0, hclsrc.Invalidf("must not be negative, got %s", s)
	case dur%time.Millisecond != 0:
		return 0, hclsrc.Invalidf("durations are kept in whole milliseconds, got %s", s)
	}
	return dur.Milliseconds(), nil
}
