package pluginsup

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"berth.dev/berth/internal/pluginproc"
)

// Builtin is one plugin shipped in the berth binary, as the composition
// root (the agent) hands it to a catalog: the packages that run plugins
// import nothing of builtin/.
type Builtin struct {
	// Name is the plugin's catalog name.
	Name string
	// Args (after the berth executable) serve the plugin: `builtin
	// driver raw_exec`.
	Args []string
	// DevOnly plugins are offered in dev mode, or when a plugin block
	// names them.
	DevOnly bool
	// CheckConfig, if not nil, checks the plugin block's config (a JSON
	// object) as the plugin will read it, so that a mistake stops the
	// agent rather than crash-loops the plugin.
	CheckConfig func(config []byte) error
}

// PluginConfig is one `plugin "NAME" { config { ... } }` block of the
// agent config.
type PluginConfig struct {
	// Name is the block's label, the plugin's catalog name.
	Name string
	// JSON is the config body as a JSON object; nil means no config.
	JSON []byte
	// Source is "file:line" of the block, for error messages.
	Source string
}

// Entry is one plugin of a catalog: how to launch it and its config, of
// type C as the kind of plugin reads it.
type Entry[C any] struct {
	// Name is the plugin's catalog name.
	Name string
	// Builtin is true for plugins shipped in the berth binary.
	Builtin bool
	// Path and Args start the plugin process. For a plugin that was not
	// found, Path is where it was looked for (or empty), so that the
	// manager finds it once an operator installs it.
	Path string
	Args []string
	// Config is the plugin block's config, read by CatalogConfig.Parse.
	Config C
	// Source is "file:line" of the plugin block, if any.
	Source string
	// Err is a problem found while building the catalog (the plugin is
	// not found, its config is invalid), a *PluginError; the manager
	// reports it as the plugin's health.
	Err error
}

// Identity implements Named.
func (e Entry[C]) Identity() (name, path, source string) { return e.Name, e.Path, e.Source }

// CatalogConfig says where the plugins of one kind come from.
type CatalogConfig[C any] struct {
	// Noun names the kind in errors: "driver".
	Noun Noun
	// Executable is the berth binary; a built-in plugin runs as
	// Executable with its Args.
	Executable string
	// Builtins are the built-in plugins of the kind.
	Builtins []Builtin
	// Dev offers the DevOnly built-ins without a plugin block.
	Dev bool
	// Dir holds third-party plugin executables, each named for the plugin
	// it serves. Empty: none.
	Dir string
	// Plugins are the agent config's plugin blocks of the kind.
	Plugins []PluginConfig
	// Parse reads a plugin block's non-empty config into an Entry's; its
	// error is fatal (no restart fixes it).
	Parse func(config []byte) (C, error)
}

// Catalog lists the plugins of a kind on a node: the built-in ones (the
// DevOnly ones in dev mode or when configured), every executable in Dir
// (which replaces a built-in plugin of the same name), and a missing
// entry for each plugin block that names neither. It returns every plugin
// it could list, sorted by name; the error, if any, is about a Dir it
// could not read, and the plugins returned are still usable.
func Catalog[C any](cfg CatalogConfig[C]) ([]Entry[C], error) {
	noun := cfg.Noun
	configs := map[string]PluginConfig{}
	for _, pc := range cfg.Plugins {
		configs[pc.Name] = pc
	}
	byName := map[string]*Entry[C]{}
	builtins := map[string]Builtin{}
	for _, b := range cfg.Builtins {
		builtins[b.Name] = b
		// Dev-only plugins (the mock driver) exist to test berth; no
		// production node should offer them unless its operator asks.
		if _, configured := configs[b.Name]; b.DevOnly && !cfg.Dev && !configured {
			continue
		}
		byName[b.Name] = &Entry[C]{Name: b.Name, Builtin: true, Path: cfg.Executable, Args: b.Args}
	}
	found, dirErr := scanDir[C](noun, cfg.Dir)
	for _, e := range found {
		byName[e.Name] = e
	}
	for name, pc := range configs {
		e, ok := byName[name]
		if !ok {
			e = &Entry[C]{Name: name}
			where := "(no plugin_dir configured)"
			if cfg.Dir != "" {
				e.Path = filepath.Join(cfg.Dir, name)
				where = cfg.Dir
			}
			e.Err = fmt.Errorf("%w: not a built-in %s (%s) and no executable %q in %s",
				ErrMissing, noun, strings.Join(slices.Sorted(maps.Keys(builtins)), ", "), name, where)
			byName[name] = e
		}
		e.Source = pc.Source
		cause := e.Err
		var pe *PluginError
		if errors.As(cause, &pe) {
			cause = pe.Err
		}
		if len(pc.JSON) > 0 {
			c, err := cfg.Parse(pc.JSON)
			e.Config = c
			if check := builtins[name].CheckConfig; err == nil && e.Builtin && check != nil {
				if err = check(pc.JSON); err != nil {
					err = fmt.Errorf("%w: %w", ErrInvalidConfig, err)
				}
			}
			if err != nil {
				// The config error is fatal, unlike a missing plugin
				// (which may yet be installed): it must win, and the
				// operator should still learn of both.
				if cause != nil {
					err = fmt.Errorf("%w; also %w", err, cause)
				}
				cause = err
			}
		}
		if cause != nil {
			e.Err = noun.Wrap(*e, cause)
		}
	}
	out := make([]Entry[C], 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, *byName[name])
	}
	return out, dirErr
}

// scanDir returns an entry for every regular file (or symlink to one) in
// dir, hidden files excepted. A file that is not executable is listed
// with ErrNotExecutable, so that the operator sees it.
func scanDir[C any](noun Noun, dir string) ([]*Entry[C], error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%ss: plugin_dir: %w", noun, err)
	}
	var out []*Entry[C]
	for _, de := range entries {
		if strings.HasPrefix(de.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, de.Name())
		st, err := os.Stat(path)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		e := &Entry[C]{Name: de.Name(), Path: path}
		e.Err = noun.CheckExecutable(*e)
		out = append(out, e)
	}
	return out, nil
}

// CheckExecutable checks, before each launch, that e's executable is
// there and executable, so that the error says so rather than
// go-plugin's: nil, or a *PluginError of ErrMissing or ErrNotExecutable.
func (n Noun) CheckExecutable(e Named) error {
	_, path, _ := e.Identity()
	if err := pluginproc.CheckExecutable(path, ErrMissing, ErrNotExecutable); err != nil {
		return n.Wrap(e, err)
	}
	return nil
}
