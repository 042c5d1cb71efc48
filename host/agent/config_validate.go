package agent

import (
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Validate checks that c describes an agent that can start, and rewrites the
// entries of server.retry_join and client.servers into canonical host:port
// form. It returns ConfigErrors naming every problem by field path and, for
// values that came from a file, by file and line.
func (c *Config) Validate() error {
	var errs ConfigErrors
	eachAttr(func(path string, def attrDef) {
		def.validate(c, path, c.pos(path), &errs)
	})

	if !c.Server.Enabled && !c.Client.Enabled {
		errs.AddNamed(c.pos("server.enabled", "client.enabled"), "server.enabled", ErrInvalidValue,
			"at least one of server.enabled and client.enabled must be true")
	}
	if c.Server.Enabled {
		pos := c.pos("server.bootstrap_expect", "server.enabled")
		switch {
		case c.Server.BootstrapExpect < 1:
			errs.Add(pos, "server.bootstrap_expect", ErrInvalidValue,
				"must be at least 1 when the server is enabled: the number of servers to wait for before electing a leader")
		case c.DevMode && c.Server.BootstrapExpect != 1:
			errs.Add(pos, "server.bootstrap_expect", ErrInvalidValue,
				"dev mode runs a single server, so it must be 1, got %d", c.Server.BootstrapExpect)
		}
		if ip, err := netip.ParseAddr(c.BindAddr); err == nil && ip.IsUnspecified() {
			errs.Add(c.pos("bind_addr"), "bind_addr", ErrInvalidValue,
				"%s cannot be advertised to raft peers; a server needs the address other servers reach it at", c.BindAddr)
		}
	}
	if c.Client.Enabled && !c.Server.Enabled && len(c.Client.Servers) == 0 {
		errs.Add(c.pos("client.servers", "client.enabled"), "client.servers", ErrInvalidValue,
			"required when this agent runs no server")
	}
	if c.DataDir == "" && !c.DevMode {
		errs.Add(c.pos("data_dir"), "data_dir", ErrInvalidValue, "required (only dev mode runs without a data dir)")
	}
	c.validatePortsDistinct(&errs)
	c.validatePlugins(&errs)
	c.validateTLS(&errs)
	c.validateHostVolumes(&errs)
	c.validateRequestLimit(&errs)
	c.validateACL(&errs)
	return errsOrNil(errs)
}

func (c *Config) validatePortsDistinct(errs *ConfigErrors) {
	ports := []struct {
		name string
		port int
	}{{"http", c.Ports.HTTP}, {"rpc", c.Ports.RPC}, {"raft", c.Ports.Raft}}
	for i, p := range ports {
		for _, q := range ports[:i] {
			if p.port == q.port && checkPort(p.port) == nil {
				path := "ports." + p.name
				errs.Add(c.pos(path), path, ErrInvalidValue, "%d is already the %s port", p.port, q.name)
				break
			}
		}
	}
}

func (c *Config) validatePlugins(errs *ConfigErrors) {
	for _, name := range slices.Sorted(maps.Keys(c.Plugins)) {
		p := c.Plugins[name]
		path := "plugin." + name
		switch {
		case name == "":
			errs.Add(c.pos(path), "plugin", ErrInvalidValue, "a plugin block needs a name")
		case p == nil:
			errs.Add(SourcePos{}, path, ErrInvalidValue, "no configuration")
		case p.Name != name:
			errs.Add(c.pos(path), path, ErrInvalidValue, "configured under the name %q", p.Name)
		}
	}
}

// pos returns where the first of paths that a file set was set.
func (c *Config) pos(paths ...string) SourcePos {
	for _, p := range paths {
		if pos, ok := c.set[p]; ok {
			return pos
		}
	}
	return SourcePos{}
}

// NormalizeServerAddr checks a server address from retry_join or client
// servers and returns it as host:port, adding DefaultRPCPort when it has no
// port. The host is a DNS name or an IP address; IPv6 addresses are written
// in brackets ("[fd00::1]" or "[fd00::1]:7647") because a bare one cannot be
// told apart from one with a port.
func NormalizeServerAddr(addr string) (string, error) {
	s := strings.TrimSpace(addr)
	if s == "" {
		return "", invalidf("empty address")
	}
	if strings.Contains(s, "://") {
		return "", invalidf("%q is not host or host:port (leave out the scheme)", addr)
	}
	host, port := s, strconv.Itoa(DefaultRPCPort)
	switch {
	case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
		host = s[1 : len(s)-1]
	case strings.Count(s, ":") == 1 || strings.HasPrefix(s, "["):
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			return "", invalidf("%q is not host or host:port", addr)
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", invalidf("%q has an invalid port %q (want 1-65535)", addr, p)
		}
		host, port = h, p
	case strings.Contains(s, ":"):
		return "", invalidf("%q is not host or host:port (write IPv6 addresses in brackets, like \"[%s]\")", addr, s)
	}
	if !strings.HasPrefix(s, "[") {
		if !isDNSName(host) {
			return "", invalidf("%q is not host or host:port: %q is not a valid host name", addr, host)
		}
		// A dotted quad is a DNS-name-shaped IPv4 address; canonicalize it.
		// A name whose last label is all digits is neither (RFC 1123 §2.1).
		if ip, err := netip.ParseAddr(host); err == nil {
			host = ip.String()
		} else if lastLabelNumeric(host) {
			return "", invalidf("%q is not host or host:port: %q is neither an IP address nor a host name", addr, host)
		}
	} else {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() {
			return "", invalidf("%q is not host or host:port: %q in brackets is not an IPv6 address", addr, host)
		}
		host = ip.String()
	}
	return net.JoinHostPort(host, port), nil
}

// isDNSName reports whether s is a syntactically valid host name (RFC 1123,
// allowing underscores as resolvers do).
func isDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
			if !ok {
				return false
			}
		}
	}
	return true
}

func lastLabelNumeric(host string) bool {
	host = strings.TrimSuffix(host, ".")
	last := host[strings.LastIndexByte(host, '.')+1:]
	return strings.Trim(last, "0123456789") == ""
}

// Field checks. They run when a file is parsed, so the error points at the
// value, and again in Validate, for values set in Go.

func checkPort(p int) error {
	if p < 1 || p > 65535 {
		return invalidf("%d is out of range 1-65535", p)
	}
	return nil
}

func checkIP(s string) error {
	if _, err := netip.ParseAddr(s); err != nil {
		return invalidf("%q is not an IP address", s)
	}
	return nil
}

func checkAbsPath(s string) error {
	if s != "" && !filepath.IsAbs(s) {
		return invalidf("%q is not an absolute path", s)
	}
	return nil
}

// logLevels are the values log_level accepts, least severe first; the
// names are go-hclog's.
var logLevels = []string{"trace", "debug", "info", "warn", "error"}

func checkLogLevel(s string) error {
	if !slices.Contains(logLevels, strings.ToLower(s)) {
		return invalidf("%q is not a log level (want one of %s)", s, strings.Join(logLevels, ", "))
	}
	return nil
}

func checkNonNegative[T int | time.Duration](v T) error {
	if v < 0 {
		return invalidf("must not be negative, got %v", v)
	}
	return nil
}

func checkPositive(d time.Duration) error {
	if d <= 0 {
		return invalidf("must be positive, got %s", d)
	}
	return nil
}

func checkAtLeastOne(n uint64) error {
	if n < 1 {
		return invalidf("must be at least 1")
	}
	return nil
}

// gcPercentMin and gcPercentMax bound server.gc_percent: below 10 the
// collector runs nearly without pause, and above 10000 the heap may grow to
// a hundred times the live state; GOGC=off (no collection at all) is not
// offered, since a server's state only grows.
const (
	gcPercentMin = 10
	gcPercentMax = 10000
)

func checkGCPercent(n int) error {
	if n < gcPercentMin || n > gcPercentMax {
		return invalidf("%d is out of range %d-%d", n, gcPercentMin, gcPercentMax)
	}
	return nil
}

// raft refuses snapshot intervals below 5ms; say so here, where the user
// can see which file to fix.
func checkSnapshotInterval(d time.Duration) error {
	if d < 5*time.Millisecond {
		return invalidf("must be at least 5ms, got %s", d)
	}
	return nil
}
