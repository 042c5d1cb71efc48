// Package tmpdir is a minimal CSI node plugin: each volume is a directory
// under the plugin's data dir, created on first publish and bind-mounted at
// the target path. It has no controller service, so volumes are registered
// (not created) and need no attachment; it exists to show what a storage
// adapter written against berth's sdk alone looks like.
package tmpdir
