package taskdrivers

import (
	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/sdk"
)

// PluginConfig is one `plugin "NAME" { config { ... } }` block of the agent
// config: Name is the driver's, JSON the config body (see
// sdk.ParseConfigJSON), Source its "file:line".
type PluginConfig = pluginsup.PluginConfig

// Builtin is one driver shipped in the berth binary, as the agent hands it
// to Catalog (builtin/drivers.Plugins).
type Builtin = pluginsup.Builtin

// Plugin is one driver of the catalog: how to launch it and its config,
// not yet validated (the schema comes from the plugin). Its Err is a
// *PluginError the manager reports as the driver's health.
type Plugin = pluginsup.Entry[sdk.ConfigMap]

// CatalogConfig says where the drivers of a node come from.
type CatalogConfig struct {
	// Executable is the berth binary; a built-in driver runs as Executable
	// with its Args. Tests point it at a test binary that serves built-in
	// drivers itself (drivers.MainIfRequested in TestMain).
	Executable string
	// Builtins are the drivers shipped in the binary; the agent hands
	// them in (builtin/drivers.Plugins).
	Builtins []Builtin
	// Dev offers dev-only built-in drivers (mock) without a plugin block.
	Dev bool
	// PluginDir holds third-party driver executables, each named for the
	// driver it serves. Empty: none.
	PluginDir string
	// Plugins are the agent config's plugin blocks.
	Plugins []PluginConfig
}

// Catalog lists the drivers of a node (see pluginsup.Catalog): the
// built-in ones (dev-only ones in dev mode or when configured), every
// executable in PluginDir (which replaces a built-in driver of the same
// name), and a missing entry for each plugin block that names neither. A
// plugin block's config must be a JSON object of config values
// (sdk.ErrConfigJSON otherwise). The error, if any, is about a PluginDir
// it could not read; the plugins returned are still usable.
func Catalog(cfg CatalogConfig) ([]Plugin, error) {
	return pluginsup.Catalog(pluginsup.CatalogConfig[sdk.ConfigMap]{
		Noun:       noun,
		Executable: cfg.Executable,
		Builtins:   cfg.Builtins,
		Dev:        cfg.Dev,
		Dir:        cfg.PluginDir,
		Plugins:    cfg.Plugins,
		Parse:      sdk.ParseConfigJSON,
	})
}
