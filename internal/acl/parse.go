package acl

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"

	"berth.dev/berth/internal/hclsrc"
)

// Rule is what a policy says about one resource: a disposition (empty
// when the rule gives capabilities only) and capabilities, as written.
type Rule struct {
	Policy       string
	Capabilities []Capability
}

// Policy is a parsed policy: a rule per resource it names.
type Policy struct {
	Rules map[Resource]Rule
}

// Parse reads a policy: HCL, or HCL's JSON syntax when filename ends in
// ".json". Every problem is reported, each as an *hclsrc.Error
// "file:line:col: path: message" wrapping ErrSyntax, ErrUnknownKey,
// ErrWrongType or ErrInvalidPolicy; the error is hclsrc.Errors.
func Parse(filename string, src []byte) (*Policy, error) {
	d := &hclsrc.Decoder{Kinds: kinds, Style: style}
	if !utf8.Valid(src) {
		d.Errs.Add(hclsrc.Pos{File: filename, Line: 1, Column: 1}, "", ErrSyntax, "syntax error: the file is not valid UTF-8")
		return nil, d.Errs
	}
	body := d.Parse(filename, src, "policy")
	if body == nil {
		d.Errs.Sort()
		return nil, d.Errs
	}
	types := make([]string, len(Resources))
	for i, r := range Resources {
		types[i] = string(r)
	}
	c := d.Content(body, hclsrc.FieldPath(""), hclsrc.Schema{Blocks: hclsrc.Blocks(types...)})
	p := &Policy{Rules: map[Resource]Rule{}}
	for _, r := range Resources {
		b := d.Single(c.Blocks, string(r), hclsrc.FieldPath(""))
		if b == nil {
			continue
		}
		if rule, ok := readRule(d, r, b); ok {
			p.Rules[r] = rule
		}
	}
	if len(d.Errs) > 0 {
		d.Errs.Sort()
		return nil, d.Errs
	}
	return p, nil
}

var kinds = hclsrc.Kinds{
	Syntax:     ErrSyntax,
	UnknownKey: ErrUnknownKey,
	WrongType:  ErrWrongType,
	Invalid:    ErrInvalidPolicy,
	Duplicate:  ErrInvalidPolicy,
}

var style = hclsrc.Style{FirstAt: "first at"}

func readRule(d *hclsrc.Decoder, r Resource, b *hcl.Block) (Rule, bool) {
	path := hclsrc.FieldPath(string(r))
	c := d.Content(b.Body, path, hclsrc.Schema{Attrs: []string{"policy", "capabilities"}})
	var rule Rule
	ok := true
	if a := c.Attributes["policy"]; a != nil {
		v, read := hclsrc.Read(d, a, path.Field("policy"), d.Style.String)
		switch {
		case !read:
			ok = false
		case !slices.Contains(Dispositions(r), v):
			d.ErrAt(a.Expr.Range(), path.Field("policy"), ErrInvalidPolicy,
				"%q is not a policy of %s; one of %s", v, r, strings.Join(Dispositions(r), ", "))
			ok = false
		default:
			rule.Policy = v
		}
	}
	if a := c.Attributes["capabilities"]; a != nil {
		caps, read := d.StringList(a, path.Field("capabilities"))
		if !read {
			ok = false
		}
		for i, s := range caps {
			if s != Deny && !Known(r, Capability(s)) {
				d.ErrAt(a.Expr.Range(), path.Field("capabilities").Index(i), ErrInvalidPolicy,
					"%q is not a capability of %s%s", s, r, hint(r, s))
				ok = false
				continue
			}
			if !slices.Contains(rule.Capabilities, Capability(s)) {
				rule.Capabilities = append(rule.Capabilities, Capability(s))
			}
		}
	}
	if ok && rule.Policy == "" && len(rule.Capabilities) == 0 {
		d.ErrAt(b.DefRange, path, ErrInvalidPolicy, "a %s rule needs a policy or capabilities", r)
		ok = false
	}
	return rule, ok
}

// hint suggests the capability s was probably meant to be, or lists r's.
func hint(r Resource, s string) string {
	names := []string{Deny}
	for _, c := range specs[r].caps {
		names = append(names, string(c))
	}
	if h := hclsrc.Suggest(s, names); h != "" {
		return fmt.Sprintf(" (did you mean %q?)", h)
	}
	return "; one of " + strings.Join(names, ", ")
}

// ValidName returns nil when name may name a policy: 1 to 128 letters,
// digits, '-' and '_', as Nomad's policy names.
func ValidName(name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("%w: policy name %q must have 1 to 128 characters", ErrInvalidPolicy, name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%w: policy name %q may hold only letters, digits, '-' and '_'", ErrInvalidPolicy, name)
		}
	}
	return nil
}
