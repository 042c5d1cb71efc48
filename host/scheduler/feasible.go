package scheduler

import (
	"regexp"
	"strconv"
	"strings"

	"berth.dev/berth/internal/versions"

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
		return pb.EnumWord(n.GetStatus()), true
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
	versions map[string]*versions.Constraint
}

func newMatcher() *matcher {
	return &matcher{regexps: map[string]*regexp.Regexp{}, versions: map[string]*versions.Constraint{}}
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
			c, err := versions.ParseConstraint(r)
			if err == nil {
				vc = &c
			}
			m.versions[r] = vc
		}
		return vc != nil && vc.Check(l)
	case OpDistinctHosts:
		return true
	}
	// An operator the jobspec should have refused: no node satisfies it,
	// and the metric names the constraint.
	return false
}
