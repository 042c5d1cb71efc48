package adapters

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"berth.dev/berth/builtin/csi/hostpath"
	"berth.dev/berth/internal/pluginsup"
)

// HostpathName is the catalog name of the built-in hostpath adapter.
const HostpathName = "hostpath"

// Names returns the names of the built-in adapters, sorted.
func Names() []string { return []string{HostpathName} }

// Args returns the arguments with which the berth binary serves the
// built-in adapter name.
func Args(name string) []string { return []string{"builtin", "csi-adapter", name} }

// Plugins is the built-in adapters as the storage adapter catalog takes
// them (csi/adapters.CatalogConfig.Builtins): each is offered in dev mode
// or when a plugin block names it, and its config is checked by
// CheckConfig. The agent hands them in, so that the CSI library links none
// of them.
func Plugins() []pluginsup.Builtin {
	var out []pluginsup.Builtin
	for _, name := range Names() {
		out = append(out, pluginsup.Builtin{
			Name: name, Args: Args(name), DevOnly: true,
			CheckConfig: func(config []byte) error { return CheckConfig(name, config) },
		})
	}
	return out
}

// CheckConfig checks the plugin block config (a JSON object) of the
// built-in adapter name, as the adapter will read it. The error names the
// key at fault.
func CheckConfig(name string, config []byte) error {
	switch name {
	case HostpathName:
		_, err := parseHostpathConfig(config)
		return err
	default:
		return fmt.Errorf("unknown built-in storage adapter %q (built in: %s)", name, strings.Join(Names(), ", "))
	}
}

// Serve serves the built-in adapter name and returns when berth shuts it
// down. `berth builtin csi-adapter NAME` calls it.
func Serve(name string) error {
	switch name {
	case HostpathName:
		return serveHostpath()
	default:
		return fmt.Errorf("unknown built-in storage adapter %q (built in: %s)", name, strings.Join(Names(), ", "))
	}
}

// MainIfRequested serves a built-in adapter and exits when args (os.Args)
// are a binary followed by Args(name); otherwise it returns at once.
func MainIfRequested(args []string) {
	if len(args) != 4 || args[1] != "builtin" || args[2] != "csi-adapter" {
		return
	}
	if err := Serve(args[3]); err != nil {
		fmt.Fprintf(os.Stderr, "builtin csi-adapter %s: %v\n", args[3], err)
		os.Exit(1)
	}
	os.Exit(0)
}

// hostpathConfig is the hostpath adapter's plugin block config.
type hostpathConfig struct {
	StateDir   string            `json:"state_dir"`
	Capacity   json.RawMessage   `json:"capacity"`
	MaxVolumes int64             `json:"max_volumes"`
	Topology   map[string]string `json:"topology"`
	Mode       string            `json:"mode"`

	MaxVolumeSize json.RawMessage `json:"max_volume_size"`
}

// parseHostpathConfig decodes config, refusing unknown keys: a misspelt
// key would otherwise be silently ignored.
func parseHostpathConfig(config []byte) (hostpathConfig, error) {
	var c hostpathConfig
	if len(bytes.TrimSpace(config)) == 0 {
		return c, nil
	}
	dec := json.NewDecoder(bytes.NewReader(config))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("hostpath adapter config: %w (keys: state_dir, capacity, max_volume_size, max_volumes, topology, mode)", err)
	}
	if _, err := c.capacity(); err != nil {
		return c, fmt.Errorf("hostpath adapter config: capacity: %w", err)
	}
	if _, err := c.maxVolumeSize(); err != nil {
		return c, fmt.Errorf("hostpath adapter config: max_volume_size: %w", err)
	}
	return c, nil
}

// capacity is the configured capacity in bytes: a number, or a size
// string as hostpath.ParseCapacity reads it ("10GiB"); absent is 0.
func (c hostpathConfig) capacity() (int64, error) { return size(c.Capacity) }

// maxVolumeSize is the configured largest volume in bytes, as capacity;
// absent is 0 (hostpath.DefaultMaxVolumeSize), and 0 itself is refused.
func (c hostpathConfig) maxVolumeSize() (int64, error) {
	n, err := size(c.MaxVolumeSize)
	if err == nil && n == 0 && len(c.MaxVolumeSize) > 0 {
		return 0, errors.New("must be more than 0 bytes (leave it out for the default, 1TiB)")
	}
	return n, err
}

// size reads a size in bytes: a number, or a string as
// hostpath.ParseCapacity reads it ("10GiB"); absent is 0.
func size(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 {
		return 0, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err == nil {
		if n < 0 {
			return 0, errors.New("must not be negative")
		}
		return n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("want a number of bytes or a size such as \"10GiB\", got %s", raw)
	}
	return hostpath.ParseCapacity(s)
}
