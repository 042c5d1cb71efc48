package agent

import (
	"os"
	"path/filepath"
)

// devPluginDir is the plugin dir of a dev agent given none: the "plugins"
// directory beside the berth binary exe when there is one — build/plugins
// for a binary `make build` put in build/, where `make plugins` puts the
// example plugins (the containerd driver among them) — else "" (the data
// dir's, which a dev agent's temporary data dir never has).
func devPluginDir(exe string) string {
	dir := filepath.Join(filepath.Dir(exe), "plugins")
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return dir
	}
	return ""
}
