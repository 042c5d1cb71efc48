package adapters

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	builtinadapters "berth.dev/berth/builtin/csi/adapters"
	"berth.dev/berth/internal/pluginproc"
)

// PluginConfig is one `plugin "NAME" { type = "csi" config { ... } }` block
// of the agent config.
type PluginConfig struct {
	// Name is the block's label, the adapter's name.
	Name string
	// JSON is the config body as a JSON object; nil means none.
	JSON []byte
	// Source is "file:line" of the block, for error messages.
	Source string
}

// CatalogConfig says where the storage adapters of a node come from.
type CatalogConfig struct {
	// Executable is the berth binary; a built-in adapter runs as
	// Executable with builtinadapters.Args(name). Tests point it at a test binary
	// that calls builtinadapters.MainIfRequested in TestMain.
	Executable string
	// Dev offers the built-in hostpath adapter without a plugin block.
	Dev bool
	// PluginDir is the agent's plugin_dir; adapters are the executables in
	// its csi/ subdirectory, each named for the adapter it serves. Empty:
	// none.
	PluginDir string
	// Plugins are the agent config's plugin blocks of type "csi".
	Plugins []PluginConfig
}

// Adapter is one storage adapter of the catalog.
type Adapter struct {
	// Name is the adapter's name (the plugin block's label).
	Name string
	// Builtin is true for adapters shipped in the berth binary.
	Builtin bool
	// Path and Args start the adapter process. For an adapter that was not
	// found, Path is where it was looked for.
	Path string
	Args []string
	// Config is the plugin block's config, a JSON object, handed to the
	// adapter in its environment (sdk.StorageAdapterEnv).
	Config []byte
	// Source is "file:line" of the plugin block, if any.
	Source string
	// Err is a problem found while building the catalog (not found, an
	// invalid config); the manager reports it as the adapter's health.
	Err error
}

func (a *Adapter) errorf(err error) *AdapterError {
	return &AdapterError{Adapter: a.Name, Path: a.Path, Source: a.Source, Err: err}
}

// CSIDir is where adapters are found under a plugin_dir.
func CSIDir(pluginDir string) string { return filepath.Join(pluginDir, "csi") }

// Catalog lists the storage adapters of a node: the built-in ones that are
// configured (all of them in dev mode), every executable in
// <PluginDir>/csi (which replaces a built-in adapter of the same name), and
// a missing entry for each plugin block that names neither. It returns
// every adapter it could list, sorted by name; the error, if any, is about
// a directory it could not read.
func Catalog(cfg CatalogConfig) ([]Adapter, error) {
	configs := map[string]PluginConfig{}
	for _, pc := range cfg.Plugins {
		configs[pc.Name] = pc
	}
	byName := map[string]*Adapter{}
	for _, name := range builtinadapters.Names() {
		if _, configured := configs[name]; cfg.Dev || configured {
			byName[name] = &Adapter{Name: name, Builtin: true, Path: cfg.Executable, Args: builtinadapters.Args(name)}
		}
	}
	var dir string
	if cfg.PluginDir != "" {
		dir = CSIDir(cfg.PluginDir)
	}
	found, dirErr := scanDir(dir)
	for _, a := range found {
		byName[a.Name] = a
	}
	for name, pc := range configs {
		a, ok := byName[name]
		if !ok {
			a = &Adapter{Name: name}
			if dir != "" {
				a.Path = filepath.Join(dir, name)
			}
			a.Err = fmt.Errorf("%w: not a built-in adapter (%s) and no executable %q in %s",
				ErrAdapterMissing, strings.Join(builtinadapters.Names(), ", "), name, orNone(dir))
			byName[name] = a
		}
		a.Source = pc.Source
		a.Config = pc.JSON
		if a.Builtin && len(pc.JSON) > 0 {
			// A built-in adapter's config is known here: a mistake in it
			// stops the agent rather than crash-looping the adapter.
			if err := builtinadapters.CheckConfig(name, pc.JSON); err != nil {
				a.Err = fmt.Errorf("%w: %w", ErrInvalidConfig, err)
			}
		}
		if a.Err != nil {
			a.Err = a.errorf(unwrapAdapterError(a.Err))
		}
	}
	out := make([]Adapter, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, *byName[name])
	}
	return out, dirErr
}

func unwrapAdapterError(err error) error {
	if ae, ok := err.(*AdapterError); ok {
		return ae.Err
	}
	return err
}

// scanDir returns an adapter for every regular file (or symlink to one) in
// dir, hidden files excepted.
func scanDir(dir string) ([]*Adapter, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("storage adapters: %w", err)
	}
	var out []*Adapter
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		st, err := os.Stat(path)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		a := &Adapter{Name: e.Name(), Path: path}
		if err := checkExecutable(a); err != nil {
			a.Err = err
		}
		out = append(out, a)
	}
	return out, nil
}

// checkExecutable checks, before each launch, that a's executable is there
// and executable, so the error says so rather than go-plugin's.
func checkExecutable(a *Adapter) error {
	if err := pluginproc.CheckExecutable(a.Path, ErrAdapterMissing, ErrAdapterNotExecutable); err != nil {
		return a.errorf(err)
	}
	return nil
}

func orNone(dir string) string {
	if dir == "" {
		return "(no plugin_dir configured)"
	}
	return dir
}
