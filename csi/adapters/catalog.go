package adapters

import (
	"path/filepath"

	"berth.dev/berth/internal/pluginsup"
)

// PluginConfig is one `plugin "NAME" { type = "csi" config { ... } }` block
// of the agent config: Name is the adapter's, JSON the config body (nil:
// none), Source its "file:line".
type PluginConfig = pluginsup.PluginConfig

// Builtin is one storage adapter shipped in the berth binary, as the agent
// hands it to Catalog (builtin/csi/adapters.Plugins), with the checker of
// its config.
type Builtin = pluginsup.Builtin

// Adapter is one storage adapter of the catalog: how to launch it, and its
// plugin block's config, a JSON object handed to the adapter in its
// environment (sdk.StorageAdapterEnv). Its Err is an *AdapterError the
// manager reports as the adapter's health.
type Adapter = pluginsup.Entry[[]byte]

// CatalogConfig says where the storage adapters of a node come from.
type CatalogConfig struct {
	// Executable is the berth binary; a built-in adapter runs as
	// Executable with its Args. Tests point it at a test binary that calls
	// builtin/csi/adapters.MainIfRequested in TestMain.
	Executable string
	// Builtins are the adapters shipped in the binary, offered in dev mode
	// or when a plugin block names them; the agent hands them in
	// (builtin/csi/adapters.Plugins).
	Builtins []Builtin
	// Dev offers the built-in adapters without a plugin block.
	Dev bool
	// PluginDir is the agent's plugin_dir; adapters are the executables in
	// its csi/ subdirectory, each named for the adapter it serves. Empty:
	// none.
	PluginDir string
	// Plugins are the agent config's plugin blocks of type "csi".
	Plugins []PluginConfig
}

// CSIDir is where adapters are found under a plugin_dir.
func CSIDir(pluginDir string) string { return filepath.Join(pluginDir, "csi") }

// Catalog lists the storage adapters of a node (see pluginsup.Catalog):
// the built-in ones that are configured (all of them in dev mode), every
// executable in <PluginDir>/csi (which replaces a built-in adapter of the
// same name), and a missing entry for each plugin block that names
// neither. A built-in adapter's config is checked here (ErrInvalidConfig);
// a third-party adapter's is its own business, passed as is. The error,
// if any, is about a directory it could not read.
func Catalog(cfg CatalogConfig) ([]Adapter, error) {
	var dir string
	if cfg.PluginDir != "" {
		dir = CSIDir(cfg.PluginDir)
	}
	return pluginsup.Catalog(pluginsup.CatalogConfig[[]byte]{
		Noun:       noun,
		Executable: cfg.Executable,
		Builtins:   cfg.Builtins,
		Dev:        cfg.Dev,
		Dir:        dir,
		Plugins:    cfg.Plugins,
		Parse:      func(config []byte) ([]byte, error) { return config, nil },
	})
}
