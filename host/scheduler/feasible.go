package scheduler

import (
	"regexp"
	"strconv"
	"strings"

	"berth.dev/berth/rpc/pb"
)

// Constraint operators the scheduler understands. "==" and "=" are the
// same; OpDistinctHosts is checked against allocs, not node attributes.
const (
	OpEqual         = "="
	OpEqualAlt      = "=="
	OpNotEqual      = "!="
	OpRegexp        = "regexp"
	OpVersion       = "version"
	OpIsSet         = "is_set"
	OpIsNotSet      = "is_not_set"
	OpDistinctHosts = "distinct_hosts"
)

// NodeAttribute resolves one interpolation target of a constraint against
// a node: "${node.unique.id}", "${node.unique.name}", "${node.status}",
// "${attr.<key>}", "${meta.<key>}", "${driver.<name>}" (set to "1" when
// the driver is detected and healthy), "${driver.<name>.version}",
// "${driver.<name>.<attribute>}". Attributes are the node's fingerprint
// attributes plus the fingerprint's own fields under Nomad's names:
// kernel.name and os.name (os), cpu.arch (arch), unique.hostname
// (hostname), cpu.numcores, cpu.totalcompute (MHz), memory.totalbytes,
// berth.version. A string that is not "${...}" is a literal. ok is false
// when the node has no such value.
func NodeAttribute(n *pb.Node, target string) (value string, ok bool) {
	if !strings.HasPrefix(target, "${") || !strings.HasSuffix(target, "}") {
		return target, true
	}
	key := target[2 : len(target)-1]
	switch key {
	case "node.unique.id":
		return n.GetId(), n.GetId() != ""
	case "node.unique.name":
		return n.GetName(), n.GetName() != ""
	case "node.status":
		return strings.ToLower(strings.TrimPrefix(n.GetStatus().String(), "NODE_STATUS_")), true
	}
	switch {
	case strings.HasPrefix(key, "attr."):
		return fingerprintAttr(n.GetFingerprint(), strings.TrimPrefix(key, "attr."))
	case strings.HasPrefix(key, "meta."):
		v, ok := n.GetMeta()[strings.TrimPrefix(key, "meta.")]
		return v, ok
	case strings.HasPrefix(key, "driver."):
		return driverAttr(n, strings.TrimPrefix(key, "driver."))
	}
	return "", false
}

func fingerprintAttr(fp *pb.NodeFingerprint, key string) (string, bool) {
	nonEmpty := func(s string) (string, bool) { return s, s != "" }
	switch key {
	case "kernel.name", "os.name":
		return nonEmpty(fp.GetOs())
	case "cpu.arch":
		return nonEmpty(fp.GetArch())
	case "unique.hostname":
		return nonEmpty(fp.GetHostname())
	case "berth.version":
		return nonEmpty(fp.GetBerthVersion())
	case "cpu.numcores":
		if fp.GetCpuCores() > 0 {
			return strconv.Itoa(int(fp.GetCpuCores())), true
		}
	case "cpu.totalcompute":
		if fp.GetCpuTotalMhz() > 0 {
			return strconv.FormatInt(fp.GetCpuTotalMhz(), 10), true
		}
	case "memory.totalbytes":
		if fp.GetMemoryBytes() > 0 {
			return strconv.FormatUint(fp.GetMemoryBytes(), 10), true
		}
	}
	v, ok := fp.GetAttributes()[key]
	return v, ok
}

func driverAttr(n *pb.Node, key string) (string, bool) {
	name, rest, _ := strings.Cut(key, ".")
	d := n.GetDrivers()[name]
	if d == nil || !d.GetDetected() {
		return "", false
	}
	switch rest {
	case "":
		if d.GetHealthy() {
			return "1", true
		}
		return "", false
	case "version":
		return d.GetVersion(), d.GetVersion() != ""
	}
	v, ok := d.GetAttributes()[rest]
	return v, ok
}

// ConstraintString is how a constraint is named in AllocMetric and in
// errors: "${attr.kernel.name} = linux".
func ConstraintString(c *pb.Constraint) string {
	switch c.GetOperator() {
	case OpDistinctHosts:
		return OpDistinctHosts
	case OpIsSet, OpIsNotSet:
		return c.GetAttribute() + " " + c.GetOperator()
	}
	return c.GetAttribute() + " " + c.GetOperator() + " " + c.GetValue()
}

// matcher checks constraints against nodes, caching compiled regexps and
// parsed version constraints across the nodes of one evaluation.
type matcher struct {
	regexps  map[string]*regexp.Regexp
	versions map[string]versionConstraint
}

func newMatcher() *matcher {
	return &matcher{regexps: map[string]*regexp.Regexp{}, versions: map[string]versionConstraint{}}
}

// check reports whether node n satisfies c. distinct_hosts is not a node
// property and always passes here.
func (m *matcher) check(c *pb.Constraint, n *pb.Node) bool {
	l, lok := NodeAttribute(n, c.GetAttribute())
	r, rok := NodeAttribute(n, c.GetValue())
	switch c.GetOperator() {
	case OpEqual, OpEqualAlt:
		return lok && rok && l == r
	case OpNotEqual:
		// As Nomad: a missing value is "not equal".
		return !lok || !rok || l != r
	case OpIsSet:
		return lok
	case OpIsNotSet:
		return !lok
	case OpRegexp:
		if !lok || !rok {
			return false
		}
		re, ok := m.regexps[r]
		if !ok {
			var err error
			if re, err = regexp.Compile(r); err != nil {
				re = nil
			}
			m.regexps[r] = re
		}
		return re != nil && re.MatchString(l)
	case OpVersion:
		if !lok || !rok {
			return false
		}
		vc, ok := m.versions[r]
		if !ok {
			vc = parseVersionConstraint(r)
			m.versions[r] = vc
		}
		v, ok := parseVersion(l)
		return ok && vc.matches(v)
	case OpDistinctHosts:
		return true
	}
	// An operator the jobspec should have refused: no node satisfies it,
	// and the metric names the constraint.
	return false
}

// version is a dotted numeric version with an optional pre-release.
type version struct {
	segs []int64
	pre  string
}

// parseVersion reads "1.2.3", "v1.2", "1.2.3-beta.1+build". Build metadata
// is ignored.
func parseVersion(s string) (version, bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	var v version
	if i := strings.IndexByte(s, '-'); i >= 0 {
		v.pre, s = s[i+1:], s[:i]
	}
	if s == "" {
		return v, false
	}
	for _, p := range strings.Split(s, ".") {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return v, false
		}
		v.segs = append(v.segs, n)
	}
	return v, true
}

// compareVersions orders versions as semver does: segments numerically
// (missing ones are 0), then a pre-release before the release.
func compareVersions(a, b version) int {
	for i := 0; i < len(a.segs) || i < len(b.segs); i++ {
		var x, y int64
		if i < len(a.segs) {
			x = a.segs[i]
		}
		if i < len(b.segs) {
			y = b.segs[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	switch {
	case a.pre == b.pre:
		return 0
	case a.pre == "":
		return 1
	case b.pre == "":
		return -1
	case a.pre < b.pre:
		return -1
	}
	return 1
}

type versionTerm struct {
	op string
	v  version
}

// versionConstraint is a conjunction like ">= 1.2, < 2"; nil terms with
// bad set mean the constraint could not be parsed and matches nothing.
type versionConstraint struct {
	terms []versionTerm
	bad   bool
}

func parseVersionConstraint(s string) versionConstraint {
	var vc versionConstraint
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		op := "="
		for _, o := range []string{">=", "<=", "!=", "~>", "==", ">", "<", "="} {
			if strings.HasPrefix(part, o) {
				op, part = o, strings.TrimSpace(part[len(o):])
				break
			}
		}
		v, ok := parseVersion(part)
		if !ok {
			return versionConstraint{bad: true}
		}
		vc.terms = append(vc.terms, versionTerm{op: op, v: v})
	}
	return vc
}

func (vc versionConstraint) matches(v version) bool {
	if vc.bad || len(vc.terms) == 0 {
		return false
	}
	for _, t := range vc.terms {
		c := compareVersions(v, t.v)
		var ok bool
		switch t.op {
		case "=", "==":
			ok = c == 0
		case "!=":
			ok = c != 0
		case ">":
			ok = c > 0
		case ">=":
			ok = c >= 0
		case "<":
			ok = c < 0
		case "<=":
			ok = c <= 0
		case "~>":
			ok = c >= 0 && pessimisticBelow(v, t.v)
		}
		if !ok {
			return false
		}
	}
	return true
}

// pessimisticBelow is the upper bound of "~> X.Y.Z": below X.(Y+1), and for
// "~> X.Y" below (X+1).
func pessimisticBelow(v, base version) bool {
	if len(base.segs) < 2 {
		return true
	}
	upper := version{segs: append([]int64(nil), base.segs[:len(base.segs)-1]...)}
	upper.segs[len(upper.segs)-1]++
	return compareVersions(version{segs: v.segs}, upper) < 0
}
