package ctrdriver

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/pkg/cap"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// Name is the driver's name in job specs and plugin blocks.
const Name = "containerd"

// Version is the driver's version.
const Version = "0.1.0"

// Defaults of the plugin config.
const (
	DefaultAddress   = "/run/containerd/containerd.sock"
	DefaultNamespace = "berth"
)

var pluginSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "address", Type: sdk.TypeString, Default: sdk.StringValue(DefaultAddress),
		Description: "containerd's gRPC socket"},
	{Name: "namespace", Type: sdk.TypeString, Default: sdk.StringValue(DefaultNamespace),
		Description: "containerd namespace holding berth's images and containers"},
	{Name: "snapshotter", Type: sdk.TypeString, Default: sdk.StringValue("overlayfs"),
		Description: "containerd snapshotter for containers' root filesystems"},
	{Name: "runtime", Type: sdk.TypeString, Default: sdk.StringValue("io.containerd.runc.v2"),
		Description: "containerd runtime (shim) running the containers"},
	{Name: "allow_privileged", Type: sdk.TypeBool, Default: sdk.BoolValue(false),
		Description: "let tasks set privileged = true (root on the host)"},
	{Name: "allow_host_mounts", Type: sdk.TypeBool, Default: sdk.BoolValue(false),
		Description: "let tasks bind host paths with mounts (berth's own task, alloc, volume and CSI mounts are always made)"},
	{Name: "allow_devices", Type: sdk.TypeBool, Default: sdk.BoolValue(false),
		Description: "let tasks add host devices with devices"},
	{Name: "allow_caps", Type: sdk.TypeList, Default: sdk.ListValue(defaultAllowCaps...),
		Description: "capabilities tasks may add with cap_add (all: any); default: Docker's default set"},
}}

var taskSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "image", Type: sdk.TypeString, Required: true,
		Description: "image reference (docker.io/library/alpine:3.20); pulled when missing"},
	{Name: "load", Type: sdk.TypeString,
		Description: "absolute path of an OCI or docker image archive imported before the image is looked up"},
	{Name: "entrypoint", Type: sdk.TypeList, Description: "replaces the image's ENTRYPOINT (and its CMD)"},
	{Name: "command", Type: sdk.TypeString, Description: "replaces the image's CMD: the program run after the entrypoint"},
	{Name: "args", Type: sdk.TypeList, Description: "arguments after command (or, without command, replacing CMD)"},
	{Name: "env", Type: sdk.TypeMap, Description: "environment added to the image's and the task's"},
	{Name: "working_dir", Type: sdk.TypeString, Description: "working directory in the container (default: the image's)"},
	{Name: "user", Type: sdk.TypeString, Description: "user[:group] (names from the image's /etc/passwd, or numbers); default: the task's user, else the image's"},
	{Name: "privileged", Type: sdk.TypeBool, Default: sdk.BoolValue(false),
		Description: "all capabilities, all host devices, no seccomp or masked paths"},
	{Name: "host_network", Type: sdk.TypeBool, Default: sdk.BoolValue(false),
		Description: "share the host's network namespace (else the container has only loopback)"},
	{Name: "cap_add", Type: sdk.TypeList, Description: "capabilities added to the default set (NET_ADMIN, or all)"},
	{Name: "cap_drop", Type: sdk.TypeList, Description: "capabilities removed from the default set (names, or all)"},
	{Name: "devices", Type: sdk.TypeList, Description: "host devices: host_path[:container_path[:permissions rwm]]"},
	{Name: "readonly_rootfs", Type: sdk.TypeBool, Default: sdk.BoolValue(false),
		Description: "mount the container's root filesystem read-only"},
	{Name: "mounts", Type: sdk.TypeList,
		Description: "bind mounts: host_path:container_path[:options], options from ro, rw, private, rslave, rshared"},
}}

func taskSpec() sdk.ConfigSpec {
	return sdk.ConfigSpec{Plugin: Name, Scope: sdk.ScopeTaskConfig, Schema: taskSchema}
}

func pluginSpec() sdk.ConfigSpec {
	return sdk.ConfigSpec{Plugin: Name, Scope: sdk.ScopePlugin, Schema: pluginSchema}
}

// TaskSchema is the schema of this driver's task config.
func TaskSchema() *driverpb.Schema { return taskSchema }

// pluginConfig is the validated plugin config.
type pluginConfig struct {
	address, namespace, snapshotter, runtime string
	gates                                    gates
}

func parsePluginConfig(cfg *driverpb.PluginConfig) (pluginConfig, error) {
	return parsePluginConfigValues(cfg.GetValues())
}

func parsePluginConfigValues(values sdk.ConfigMap) (pluginConfig, error) {
	vals, err := pluginSpec().Validate(values)
	if err != nil {
		return pluginConfig{}, err
	}
	pc := pluginConfig{
		address: vals.String("address"), namespace: vals.String("namespace"),
		snapshotter: vals.String("snapshotter"), runtime: vals.String("runtime"),
		gates: gates{privileged: vals.Bool("allow_privileged"), hostMounts: vals.Bool("allow_host_mounts"),
			devices: vals.Bool("allow_devices")},
	}
	bad := func(key, problem string) error {
		return &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopePlugin, Key: key, Problem: problem}
	}
	caps, err := parseCaps(vals.List("allow_caps"))
	if err != nil {
		return pluginConfig{}, bad("allow_caps", err.Error())
	}
	pc.gates.caps = caps
	switch {
	case pc.address == "":
		return pluginConfig{}, bad("address", "must name containerd's socket")
	case !validNamespace(pc.namespace):
		return pluginConfig{}, bad("namespace", fmt.Sprintf("%q is not a containerd namespace (letters, digits, '.', '_', '-'; starting with a letter or digit)", pc.namespace))
	case pc.snapshotter == "":
		return pluginConfig{}, bad("snapshotter", "must name a snapshotter")
	case pc.runtime == "":
		return pluginConfig{}, bad("runtime", "must name a runtime")
	}
	return pc, nil
}

func validNamespace(ns string) bool {
	if ns == "" || len(ns) > 76 {
		return false
	}
	for i, r := range ns {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("._-", r)) {
			return false
		}
	}
	return true
}

// bindMount is a mount of the task config's mounts list.
type bindMount struct {
	index          int // in the config's mounts list
	source, target string
	readOnly       bool
	propagation    string // rprivate, rslave or rshared
}

// device is an entry of the devices list.
type device struct {
	host, container, permissions string
}

// taskConfig is a validated task config.
type taskConfig struct {
	image, load         string
	entrypoint          []string
	command             string
	hasCommand          bool
	args                []string
	hasArgs, hasEntry   bool
	env                 map[string]string
	workingDir, user    string
	privileged, hostNet bool
	readonlyRootfs      bool
	capAdd, capDrop     []string
	devices             []device
	mounts              []bindMount
}

// parseTaskConfig validates a task's driver config; every problem is a
// *sdk.ConfigError naming its key (berth maps keys to file:line).
func parseTaskConfig(in sdk.ConfigMap) (*taskConfig, error) {
	vals, err := taskSpec().Validate(in)
	if err != nil {
		return nil, err
	}
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopeTaskConfig, Key: key, Problem: fmt.Sprintf(format, args...)})
	}
	tc := &taskConfig{
		image: vals.String("image"), load: vals.String("load"),
		entrypoint: vals.List("entrypoint"), hasEntry: vals.Has("entrypoint"),
		command: vals.String("command"), hasCommand: vals.Has("command"),
		args: vals.List("args"), hasArgs: vals.Has("args"),
		env: vals.Map("env"), workingDir: vals.String("working_dir"), user: vals.String("user"),
		privileged: vals.Bool("privileged"), hostNet: vals.Bool("host_network"),
		readonlyRootfs: vals.Bool("readonly_rootfs"),
	}
	if strings.TrimSpace(tc.image) == "" {
		bad("image", "must name an image")
	}
	if tc.load != "" && !filepath.IsAbs(tc.load) {
		bad("load", "%q is not an absolute path", tc.load)
	}
	if tc.hasCommand && tc.command == "" {
		bad("command", "must not be empty")
	}
	if tc.workingDir != "" && !filepath.IsAbs(tc.workingDir) {
		bad("working_dir", "%q is not an absolute path", tc.workingDir)
	}
	for k := range tc.env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			bad("env", "%q is not a valid variable name", k)
		}
	}
	tc.capAdd, err = parseCaps(vals.List("cap_add"))
	if err != nil {
		bad("cap_add", "%v", err)
	}
	tc.capDrop, err = parseCaps(vals.List("cap_drop"))
	if err != nil {
		bad("cap_drop", "%v", err)
	}
	for i, s := range vals.List("devices") {
		d, err := parseDevice(s)
		if err != nil {
			bad("devices", "devices[%d] %q: %v", i, s, err)
			continue
		}
		tc.devices = append(tc.devices, d)
	}
	seen := map[string]int{}
	for i, s := range vals.List("mounts") {
		m, err := parseMount(s)
		if err != nil {
			bad("mounts", "mounts[%d] %q: %v", i, s, err)
			continue
		}
		if j, dup := seen[m.target]; dup {
			bad("mounts", "mounts[%d] %q: container path %s is also the container path of mounts[%d]", i, s, m.target, j)
			continue
		}
		seen[m.target] = i
		m.index = i
		tc.mounts = append(tc.mounts, m)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return tc, nil
}

// parseCaps turns capability names (NET_ADMIN, cap_net_admin, all) into
// the CAP_ names the OCI spec uses; "ALL" stays as is.
func parseCaps(names []string) ([]string, error) {
	known := cap.Known()
	var out []string
	for _, n := range names {
		c := strings.ToUpper(strings.TrimSpace(n))
		if c == "ALL" {
			out = append(out, c)
			continue
		}
		if !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		if !slices.Contains(known, c) {
			return nil, fmt.Errorf("unknown capability %q", n)
		}
		out = append(out, c)
	}
	return out, nil
}

func parseDevice(s string) (device, error) {
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return device{}, fmt.Errorf("want host_path[:container_path[:permissions]]")
	}
	d := device{host: parts[0], container: parts[0], permissions: "rwm"}
	if len(parts) > 1 && parts[1] != "" {
		d.container = parts[1]
	}
	if len(parts) > 2 {
		d.permissions = parts[2]
	}
	if !cleanAbs(d.host) || !cleanAbs(d.container) {
		return device{}, fmt.Errorf("paths must be absolute, without '..' elements")
	}
	if d.permissions == "" || strings.Trim(d.permissions, "rwm") != "" {
		return device{}, fmt.Errorf("permissions %q: want letters from r, w, m", d.permissions)
	}
	return d, nil
}

func parseMount(s string) (bindMount, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return bindMount{}, fmt.Errorf("want host_path:container_path[:options]")
	}
	m := bindMount{source: parts[0], target: filepath.Clean(parts[1]), propagation: "rprivate"}
	if !cleanAbs(parts[0]) || !cleanAbs(parts[1]) {
		return bindMount{}, fmt.Errorf("paths must be absolute, without '..' elements")
	}
	if m.target == "/" {
		return bindMount{}, fmt.Errorf("container path must not be /")
	}
	if len(parts) == 3 {
		for _, o := range strings.Split(parts[2], ",") {
			switch o {
			case "ro":
				m.readOnly = true
			case "rw":
				m.readOnly = false
			case "private", "rprivate":
				m.propagation = "rprivate"
			case "slave", "rslave":
				m.propagation = "rslave"
			case "shared", "rshared":
				m.propagation = "rshared"
			default:
				return bindMount{}, fmt.Errorf("unknown option %q (want ro, rw, private, rslave, rshared)", o)
			}
		}
	}
	return m, nil
}

func cleanAbs(p string) bool {
	return filepath.IsAbs(p) && !strings.ContainsRune(p, 0) && !slices.Contains(strings.Split(p, "/"), "..")
}

// propagationOf is the OCI propagation of a driver-protocol mount.
func propagationOf(p driverpb.MountPropagation) string {
	switch p {
	case driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK:
		return "rslave"
	case driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL:
		return "rshared"
	}
	return "rprivate"
}
