package hostpath

import (
	"errors"
	"fmt"
	"math/big"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// PluginName is the CSI plugin name reported by GetPluginInfo.
const PluginName = "hostpath.csi.berth.dev"

// Modes a plugin process can run in: which CSI services it serves.
const (
	// ModeMonolith serves the identity, controller and node services.
	ModeMonolith = "monolith"
	// ModeController serves the identity and controller services.
	ModeController = "controller"
	// ModeNode serves the identity and node services.
	ModeNode = "node"
)

// PoolTopologyKey is the topology segment every node reports and every volume
// carries: the identity of the state directory (the storage pool). Volumes of a
// pool are reachable from exactly the nodes that share its state directory.
const PoolTopologyKey = "hostpath.csi.berth.dev/pool"

// DefaultMaxVolumeSize is the largest volume a plugin makes when
// Config.MaxVolumeSize is 0: 1TiB, as the kubernetes-csi hostpath driver's
// --maxvolumesize.
const DefaultMaxVolumeSize int64 = 1 << 40

// defaultShutdownGrace bounds how long a stopping plugin waits for in-flight
// calls before cancelling them.
const defaultShutdownGrace = 30 * time.Second

// Config configures a hostpath plugin process.
type Config struct {
	Endpoint   string            // "unix:///path/csi.sock" or a plain path
	NodeID     string            // required in monolith and node mode
	StateDir   string            // where volumes, snapshots and the plugin's state live
	Capacity   int64             // bytes; 0 = what the state directory's filesystem has free
	Mode       string            // "monolith" (default), "controller", "node"
	MaxVolumes int64             // 0 = unlimited
	Topology   map[string]string // e.g. {"zone":"z1"}
	Logger     hclog.Logger      // nil = discard

	// MaxVolumeSize is the largest volume CreateVolume and
	// ControllerExpandVolume make, in bytes; 0 = DefaultMaxVolumeSize.
	MaxVolumeSize int64

	// ShutdownGrace bounds how long a stop waits for in-flight calls before
	// they are cancelled; 0 means 30s.
	ShutdownGrace time.Duration

	// NoPublish makes the controller serve no ControllerPublishVolume or
	// ControllerUnpublishVolume (Unimplemented) and not advertise
	// PUBLISH_UNPUBLISH_VOLUME, as kubernetes-csi's hostpath plugin without
	// --enable-attach: a plugin whose volumes need no attach step. The node
	// service stages and publishes without a publish context.
	NoPublish bool

	// Fault injection, for tests and fault drills (see delays.go): calls of
	// the CSI methods in DelayBefore are held that long before they run,
	// those in DelayAfter hold their reply that long after they ran (the
	// work is done, the caller does not know yet). Keys are bare method
	// names ("NodeStageVolume"). When DelayMarkerDir is set, each held call
	// creates a file there as its hold starts, so a test can wait for the
	// call to be in flight instead of sleeping.
	DelayBefore    map[string]time.Duration
	DelayAfter     map[string]time.Duration
	DelayMarkerDir string
}

// ConfigError is returned by Run and Start when a Config field is invalid.
type ConfigError struct {
	Field string // the Config field (or CLI flag) at fault
	Value string // the offending value, as given
	Err   error  // what is wrong with it
}

func (e *ConfigError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("hostpath config: %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("hostpath config: %s %q: %v", e.Field, e.Value, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// ErrBadCapacity is returned (wrapped) by ParseCapacity for a malformed size.
var ErrBadCapacity = errcode.New(codes.InvalidArgument, "invalid capacity")

// ErrBadTopology is returned (wrapped) by ParseTopology for a malformed segment.
var ErrBadTopology = errcode.New(codes.InvalidArgument, "invalid topology segment")

// runtimeConfig is a validated Config with defaults applied.
type runtimeConfig struct {
	Config
	socketPath string
	controller bool
	node       bool
}

func (c Config) validate() (runtimeConfig, error) {
	rc, err := c.validateServices()
	if err != nil {
		return rc, err
	}
	path, err := socketPath(c.Endpoint)
	if err != nil {
		return rc, &ConfigError{Field: "Endpoint", Value: c.Endpoint, Err: err}
	}
	rc.socketPath = path
	return rc, nil
}

// validateServices checks everything but the endpoint: what NewServices
// needs, whose caller owns the listener.
func (c Config) validateServices() (runtimeConfig, error) {
	rc := runtimeConfig{Config: c}
	if rc.Logger == nil {
		rc.Logger = hclog.NewNullLogger()
	}
	if rc.ShutdownGrace <= 0 {
		rc.ShutdownGrace = defaultShutdownGrace
	}
	switch rc.Mode {
	case "", ModeMonolith:
		rc.Mode, rc.controller, rc.node = ModeMonolith, true, true
	case ModeController:
		rc.controller = true
	case ModeNode:
		rc.node = true
	default:
		return rc, &ConfigError{Field: "Mode", Value: c.Mode, Err: errors.New("must be monolith, controller or node")}
	}
	if c.StateDir == "" {
		return rc, &ConfigError{Field: "StateDir", Err: errors.New("is required")}
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return rc, &ConfigError{Field: "StateDir", Value: c.StateDir, Err: err}
	}
	rc.StateDir = abs
	if c.DelayMarkerDir != "" {
		// A relative marker directory is the launching process's: a task's
		// own directory for a plugin run as a task.
		if rc.DelayMarkerDir, err = filepath.Abs(c.DelayMarkerDir); err != nil {
			return rc, &ConfigError{Field: "DelayMarkerDir", Value: c.DelayMarkerDir, Err: err}
		}
	}
	if rc.node {
		if c.NodeID == "" {
			return rc, &ConfigError{Field: "NodeID", Err: fmt.Errorf("is required in %s mode", rc.Mode)}
		}
		if !validNodeID(c.NodeID) {
			return rc, &ConfigError{Field: "NodeID", Value: c.NodeID, Err: errors.New("must be 1-128 characters of letters, digits, '.', '_' and '-', not starting with '.'")}
		}
	}
	if c.Capacity < 0 {
		return rc, &ConfigError{Field: "Capacity", Value: fmt.Sprint(c.Capacity), Err: errors.New("must not be negative")}
	}
	if c.MaxVolumes < 0 {
		return rc, &ConfigError{Field: "MaxVolumes", Value: fmt.Sprint(c.MaxVolumes), Err: errors.New("must not be negative")}
	}
	switch {
	case c.MaxVolumeSize < 0:
		return rc, &ConfigError{Field: "MaxVolumeSize", Value: fmt.Sprint(c.MaxVolumeSize), Err: errors.New("must not be negative")}
	case c.MaxVolumeSize == 0:
		rc.MaxVolumeSize = DefaultMaxVolumeSize
	}
	if err := c.validateDelays(); err != nil {
		return rc, err
	}
	keys := make([]string, 0, len(c.Topology))
	for k := range c.Topology {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := validateSegment(k, c.Topology[k]); err != nil {
			return rc, &ConfigError{Field: "Topology", Value: k + "=" + c.Topology[k], Err: err}
		}
	}
	return rc, nil
}

// socketPath turns a CSI endpoint ("unix:///p", "unix:/p", "unix://p" or a
// plain path) into the socket's absolute path. Other schemes are refused: the
// plugin can bind-mount as root, so it only listens on a local socket.
func socketPath(endpoint string) (string, error) {
	if endpoint == "" {
		return "", errors.New("is required (unix:///path/csi.sock or a path)")
	}
	p := endpoint
	if scheme, rest, ok := strings.Cut(endpoint, "://"); ok {
		if scheme != "unix" {
			return "", fmt.Errorf("scheme %q not supported; only unix sockets are", scheme)
		}
		p = rest
	} else if rest, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		p = rest
	}
	if p == "" {
		return "", errors.New("has no socket path")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	// sockaddr_un.sun_path is 108 bytes including the terminating NUL.
	if len(abs) > 107 {
		return "", fmt.Errorf("socket path is %d bytes; unix sockets allow at most 107", len(abs))
	}
	return abs, nil
}

var (
	// Compiled on first use, not at start-up: every berth command links
	// this package, and the counted repeats ({0,127}, {0,61}) made these
	// the dearest initialisation of the CLI (issue 26).
	nodeIDPattern  = lazyRegexp(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)
	segNamePattern = lazyRegexp(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	dnsSubdomain   = lazyRegexp(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
)

func validNodeID(id string) bool { return nodeIDPattern().MatchString(id) }

// validateSegment checks a topology key and value against the CSI rules: an
// optional DNS-subdomain prefix and a '/', then a name of at most 63
// characters; values at most 63 characters of the same alphabet.
func validateSegment(key, value string) error {
	if key == PoolTopologyKey {
		return fmt.Errorf("key %q is set by the plugin itself", key)
	}
	name := key
	if prefix, rest, ok := strings.Cut(key, "/"); ok {
		if len(prefix) > 253 || !dnsSubdomain().MatchString(prefix) {
			return fmt.Errorf("key prefix %q is not a DNS subdomain", prefix)
		}
		name = rest
	}
	if !segNamePattern().MatchString(name) {
		return fmt.Errorf("key name %q must be 1-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric", name)
	}
	if !segNamePattern().MatchString(value) {
		return fmt.Errorf("value %q must be 1-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric", value)
	}
	return nil
}

// ParseTopology parses "key=value" segments (as given to --topology; each
// element may also hold several comma-separated segments) into a map.
func ParseTopology(segments []string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range segments {
		for _, seg := range strings.Split(s, ",") {
			seg = strings.TrimSpace(seg)
			if seg == "" {
				continue
			}
			k, v, ok := strings.Cut(seg, "=")
			if !ok {
				return nil, fmt.Errorf("%w %q: want key=value", ErrBadTopology, seg)
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if err := validateSegment(k, v); err != nil {
				return nil, fmt.Errorf("%w %q: %v", ErrBadTopology, seg, err)
			}
			if old, dup := out[k]; dup && old != v {
				return nil, fmt.Errorf("%w %q: key %q already set to %q", ErrBadTopology, seg, k, old)
			}
			out[k] = v
		}
	}
	return out, nil
}

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "ki": 1 << 10, "kib": 1 << 10,
	"m": 1e6, "mb": 1e6, "mi": 1 << 20, "mib": 1 << 20,
	"g": 1e9, "gb": 1e9, "gi": 1 << 30, "gib": 1 << 30,
	"t": 1e12, "tb": 1e12, "ti": 1 << 40, "tib": 1 << 40,
	"p": 1e15, "pb": 1e15, "pi": 1 << 50, "pib": 1 << 50,
}

// ParseCapacity parses a size such as "10GiB", "500MiB", "1G", "1.5TiB" or
// "1048576" into bytes. Binary units (KiB, MiB, GiB, TiB, PiB; "Ki" etc.
// also accepted) are powers of 1024, decimal units (K, M, G, T, P, with or
// without "B") powers of 1000, as in Kubernetes quantities. Units are
// case-insensitive. The result must be a whole, non-negative number of bytes
// that fits in an int64.
func ParseCapacity(s string) (int64, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("%w %q: empty", ErrBadCapacity, s)
	}
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit := in[:i], strings.ToLower(strings.TrimSpace(in[i:]))
	if num == "" || num == "." || strings.Count(num, ".") > 1 {
		return 0, fmt.Errorf("%w %q: want a number followed by an optional unit such as MiB or GB", ErrBadCapacity, s)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("%w %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, PiB or K, M, G, T, P)", ErrBadCapacity, s, in[i:])
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%w %q: bad number %q", ErrBadCapacity, s, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("%w %q: not a whole number of bytes", ErrBadCapacity, s)
	}
	n := r.Num()
	if !n.IsInt64() {
		return 0, fmt.Errorf("%w %q: too large", ErrBadCapacity, s)
	}
	return n.Int64(), nil
}

// humanBytes renders n in the largest binary unit it fills ("100TiB",
// "1.5GiB", "512B"), for error messages that also give the exact bytes.
func humanBytes(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	if n < 1<<10 && n > -(1<<10) {
		return fmt.Sprintf("%dB", n)
	}
	v, i := float64(n)/(1<<10), 0
	for i < len(units)-1 && (v >= 1<<10 || v <= -(1<<10)) {
		v /= 1 << 10
		i++
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + units[i]
}
