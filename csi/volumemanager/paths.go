package volumemanager

import (
	"fmt"
	"path/filepath"
	"strings"
)

// PluginBase is the host directory under which the volumes of plugin
// pluginID are staged and published: <data_dir>/csi/volumes/<plugin>/,
// what the csi_plugin supervisor mounts into an isolated plugin task.
func PluginBase(dataDir, pluginID string) string {
	return filepath.Join(dataDir, "csi", "volumes", pluginID)
}

// StagingPath is the host staging target of volume volumeID of plugin
// pluginID: <data_dir>/csi/volumes/<plugin>/staging/<volume>.
func StagingPath(dataDir, pluginID, volumeID string) string {
	return filepath.Join(PluginBase(dataDir, pluginID), "staging", volumeID)
}

// TargetPath is the host publish target of volume volumeID for user (an
// alloc ID or an operator's claim ID):
// <data_dir>/csi/volumes/<plugin>/publish/<user>/<volume>.
func TargetPath(dataDir, pluginID, user, volumeID string) string {
	return filepath.Join(PluginBase(dataDir, pluginID), "publish", user, volumeID)
}

// PublishPath is where user finds volume volumeID on the host:
// <data_dir>/csi/publish/<user>/<volume>, a symlink to the publish target.
// It is what a raw_exec task gets in BERTH_VOLUME_<NAME>, what an isolating
// driver bind-mounts, and what `berth volume claim` prints.
func PublishPath(dataDir, user, volumeID string) string {
	return filepath.Join(dataDir, "csi", "publish", user, volumeID)
}

// pluginView turns host path p, under the plugin's base, into the path the
// plugin sees: under stageDir when the plugin runs isolated (stageDir is
// its registry entry's stage_publish_dir), p itself otherwise.
func pluginView(dataDir, pluginID, stageDir, p string) string {
	base := PluginBase(dataDir, pluginID)
	if stageDir == "" || stageDir == base {
		return p
	}
	rel, err := filepath.Rel(base, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return filepath.Join(stageDir, rel)
}

// checkName refuses an ID that would not stay one path element.
func checkName(what, s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\\\x00") {
		return fmt.Errorf("%w: %s %q is not usable as a path element", ErrInvalidRequest, what, s)
	}
	return nil
}
