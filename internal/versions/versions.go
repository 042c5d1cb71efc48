package versions

import (
	"fmt"
	"strconv"
	"strings"
)

// Constraint is a parsed constraint: a comma-separated list of comparisons
// that must all hold, as in ">= 1.2, < 2" or "~> 1.4.0".
type Constraint struct {
	terms []versionTerm
}

type versionTerm struct {
	op string // "=", "!=", ">", ">=", "<", "<=", "~>"
	v  version
}

// ParseConstraint parses a constraint.
func ParseConstraint(s string) (Constraint, error) {
	var c Constraint
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return Constraint{}, fmt.Errorf("version constraint %q has an empty term", s)
		}
		op := "="
		for _, o := range []string{"==", ">=", "<=", "!=", "~>", ">", "<", "="} {
			if strings.HasPrefix(part, o) {
				op, part = o, strings.TrimSpace(part[len(o):])
				break
			}
		}
		if op == "==" {
			op = "="
		}
		v, err := parseVersion(part)
		if err != nil {
			return Constraint{}, fmt.Errorf("version constraint %q: %w", s, err)
		}
		c.terms = append(c.terms, versionTerm{op: op, v: v})
	}
	return c, nil
}

// MustConstraint is ParseConstraint for constraints written in the code
// (the version gates): it panics on an error, which a test catches.
func MustConstraint(s string) Constraint {
	c, err := ParseConstraint(s)
	if err != nil {
		panic(err)
	}
	return c
}

// Check reports whether the version s satisfies every term; a string that is
// not a version satisfies nothing.
func (c Constraint) Check(s string) bool {
	v, err := parseVersion(s)
	if err != nil {
		return false
	}
	for _, t := range c.terms {
		n := v.compare(t.v)
		var ok bool
		switch t.op {
		case "=":
			ok = n == 0
		case "!=":
			ok = n != 0
		case ">":
			ok = n > 0
		case ">=":
			ok = n >= 0
		case "<":
			ok = n < 0
		case "<=":
			ok = n <= 0
		case "~>":
			ok = n >= 0 && v.pessimisticPrefix(t.v)
		}
		if !ok {
			return false
		}
	}
	return true
}

// version is a dotted version with an optional pre-release; build metadata
// ("+abc") is ignored, as semver says.
type version struct {
	segs []int64
	pre  string // "beta1" in "1.2.0-beta1"
}

func parseVersion(s string) (version, error) {
	raw := s
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	var v version
	if i := strings.IndexByte(s, '-'); i >= 0 {
		s, v.pre = s[:i], s[i+1:]
		if v.pre == "" {
			return version{}, fmt.Errorf("malformed version %q: empty pre-release", raw)
		}
	}
	for seg := range strings.SplitSeq(s, ".") {
		n, err := strconv.ParseInt(seg, 10, 64)
		if err != nil || n < 0 || seg == "" || seg[0] == '+' {
			return version{}, fmt.Errorf("malformed version %q", raw)
		}
		v.segs = append(v.segs, n)
	}
	return v, nil
}

// compare orders versions: missing segments are 0, and a pre-release comes
// before its release (1.2.0-beta1 < 1.2.0).
func (v version) compare(o version) int {
	for i := range max(len(v.segs), len(o.segs)) {
		a, b := seg(v.segs, i), seg(o.segs, i)
		if a != b {
			if a < b {
				return -1
			}
			return 1
		}
	}
	switch {
	case v.pre == o.pre:
		return 0
	case v.pre == "":
		return 1
	case o.pre == "":
		return -1
	}
	return comparePre(v.pre, o.pre)
}

// comparePre orders pre-releases identifier by identifier, numbers
// numerically and below words, as semver does.
func comparePre(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range min(len(as), len(bs)) {
		x, xerr := strconv.ParseInt(as[i], 10, 64)
		y, yerr := strconv.ParseInt(bs[i], 10, 64)
		switch {
		case xerr == nil && yerr == nil:
			if x != y {
				if x < y {
					return -1
				}
				return 1
			}
		case xerr == nil:
			return -1
		case yerr == nil:
			return 1
		default:
			if c := strings.Compare(as[i], bs[i]); c != 0 {
				return c
			}
		}
	}
	switch {
	case len(as) < len(bs):
		return -1
	case len(as) > len(bs):
		return 1
	}
	return 0
}

func seg(s []int64, i int) int64 {
	if i < len(s) {
		return s[i]
	}
	return 0
}

// pessimisticPrefix reports whether v keeps all but the last segment that
// the constraint version c wrote: "~> 1.2" allows 1.x from 1.2, "~> 1.2.3"
// allows 1.2.x from 1.2.3.
func (v version) pessimisticPrefix(c version) bool {
	keep := max(len(c.segs)-1, 1)
	for i := range keep {
		if seg(v.segs, i) != seg(c.segs, i) {
			return false
		}
	}
	return true
}
