package taskdrivers

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"berth.dev/berth/builtin/drivers"
	"berth.dev/berth/internal/pluginproc"
	"berth.dev/berth/sdk"
)

// PluginConfig is one `plugin "NAME" { config { ... } }` block of the agent
// config.
type PluginConfig struct {
	// Name is the block's label, the driver's name.
	Name string
	// JSON is the config body as a JSON object (see sdk.ParseConfigJSON);
	// nil means no config.
	JSON []byte
	// Source is "file:line" of the block, for error messages.
	Source string
}

// CatalogConfig says where the drivers of a node come from.
type CatalogConfig struct {
	// Executable is the berth binary; a built-in driver runs as Executable
	// with drivers.Args(name). Tests point it at a test binary that serves
	// built-in drivers itself (drivers.MainIfRequested in TestMain).
	Executable string
	// Dev offers dev-only built-in drivers (mock) without a plugin block.
	Dev bool
	// PluginDir holds third-party driver executables, each named for the
	// driver it serves. Empty: none.
	PluginDir string
	// Plugins are the agent config's plugin blocks.
	Plugins []PluginConfig
}

// Plugin is one driver of the catalog: how to launch it and its config.
type Plugin struct {
	// Name is the driver's name in job specs.
	Name string
	// Builtin is true for drivers shipped in the berth binary.
	Builtin bool
	// Path and Args start the plugin process. For a plugin that was not
	// found, Path is where it was looked for in plugin_dir (or empty), so
	// that the manager finds it once an operator installs it.
	Path string
	Args []string
	// Config is the plugin config from the agent config, not yet
	// validated: the schema comes from the plugin.
	Config sdk.ConfigMap
	// Source is "file:line" of the plugin block, if any.
	Source string
	// Err is a problem found while building the catalog (the plugin is not
	// found, its config is not valid JSON values); the manager reports it
	// as the driver's health.
	Err error
}

// errorf wraps err as a *PluginError about p.
func (p *Plugin) errorf(err error) *PluginError {
	return &PluginError{Driver: p.Name, Path: p.Path, Source: p.Source, Err: err}
}

// Catalog lists the drivers of a node: the built-in ones (dev-only ones in
// dev mode or when configured), every executable in PluginDir (which
// replaces a built-in driver of the same name), and a missing entry for
// each plugin block that names neither. It returns every plugin it could
// list, sorted by name; the error, if any, is about a PluginDir it could
// not read, and the plugins returned are still usable.
func Catalog(cfg CatalogConfig) ([]Plugin, error) {
	configs := map[string]PluginConfig{}
	for _, pc := range cfg.Plugins {
		configs[pc.Name] = pc
	}
	byName := map[string]*Plugin{}
	builtinNames := drivers.Names()
	for _, b := range drivers.All() {
		// Dev-only drivers (mock) exist to test berth; no production node
		// should advertise them unless its operator asks.
		if _, configured := configs[b.Name]; b.DevOnly && !cfg.Dev && !configured {
			continue
		}
		byName[b.Name] = &Plugin{Name: b.Name, Builtin: true, Path: cfg.Executable, Args: drivers.Args(b.Name)}
	}
	found, dirErr := scanPluginDir(cfg.PluginDir)
	for _, p := range found {
		byName[p.Name] = p
	}
	for name, pc := range configs {
		p, ok := byName[name]
		if !ok {
			p = &Plugin{Name: name, Source: pc.Source}
			if cfg.PluginDir != "" {
				p.Path = filepath.Join(cfg.PluginDir, name)
			}
			p.Err = p.errorf(fmt.Errorf("%w: not a built-in driver (%s) and no executable %q in plugin_dir %s",
				ErrPluginMissing, strings.Join(builtinNames, ", "), name, orNone(cfg.PluginDir)))
			byName[name] = p
		}
		p.Source = pc.Source
		if pe, ok := p.Err.(*PluginError); ok {
			pe.Source = pc.Source
		}
		if len(pc.JSON) > 0 {
			m, err := sdk.ParseConfigJSON(pc.JSON)
			if err != nil {
				// The config error is fatal, unlike a missing plugin
				// (which may yet be installed): it must win, and the
				// operator should still learn of both.
				if pe, ok := p.Err.(*PluginError); ok {
					err = fmt.Errorf("%w; also %w", err, pe.Err)
				}
				p.Err = p.errorf(err)
			}
			p.Config = m
		}
	}
	out := make([]Plugin, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, *byName[name])
	}
	return out, dirErr
}

// scanPluginDir returns a plugin for every regular file (or symlink to one)
// in dir, hidden files excepted. A file that is not executable is listed
// with ErrPluginNotExecutable so that the operator sees it.
func scanPluginDir(dir string) ([]*Plugin, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plugin_dir %s: %w", dir, err)
	}
	var out []*Plugin
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		st, err := os.Stat(path)
		if err != nil || st.IsDir() || !st.Mode().IsRegular() {
			continue
		}
		p := &Plugin{Name: e.Name(), Path: path}
		p.Err = checkExecutable(p)
		out = append(out, p)
	}
	return out, nil
}

// checkExecutable checks, before each launch, that p's executable is there
// and executable, so that the error says so rather than go-plugin's.
func checkExecutable(p *Plugin) error {
	if err := pluginproc.CheckExecutable(p.Path, ErrPluginMissing, ErrPluginNotExecutable); err != nil {
		return p.errorf(err)
	}
	return nil
}

func orNone(dir string) string {
	if dir == "" {
		return "(none configured)"
	}
	return dir
}
