// Package volumemanager is a client's node volume manager: it stages a CSI
// volume once per node (when the plugin has STAGE_UNSTAGE), publishes it
// once per user — an alloc, or an operator's claim — and takes both down
// again, keeping in the client state DB which users each staged volume has.
//
//	m, err := volumemanager.New(volumemanager.Config{
//		DataDir: dataDir, NodeID: nodeID,
//		Store:   db,                                  // *state.DB
//		Plugins: volumemanager.PluginManager(plugins), // *pluginmanager.Manager
//	})
//	path, err := m.Publish(ctx, volumemanager.PublishRequest{...})
//	err = m.Unpublish(ctx, allocID, volumeID, nil)
//
// # Layout on the host
//
//	<data_dir>/csi/volumes/<plugin>/staging/<volume>/         NodeStageVolume target
//	<data_dir>/csi/volumes/<plugin>/publish/<user>/<volume>   NodePublishVolume target
//	<data_dir>/csi/publish/<user>/<volume>                    a symlink to the publish target
//
// The design puts staging and publish targets in two trees keyed by
// plugin and by user. The targets themselves live under the plugin's one
// base directory instead, because an isolated plugin task sees the host
// only through the mount of that base (its csi_plugin
// stage_publish_base_dir; see volumehooks): targets anywhere
// else would not exist for it. The path users see — the one tasks get
// (BERTH_VOLUME_<NAME>, the bind mount's source) and `berth volume claim`
// prints — is the design's <data_dir>/csi/publish/<user>/<volume>, a
// symlink to the target. Targets are given to the plugin as it sees them:
// under its registry entry's stage_publish_dir, or the host path for a
// storage adapter and an unisolated plugin task.
//
// # Usage, persisted
//
// One VolumeUsageRecord per volume (state DB bucket csi_volumes) holds the
// stage state and every use with its state. It is written before every
// stage and publish call (STAGING, PUBLISHING) and after each succeeds.
// A teardown writes nothing before its calls: it removes the user's
// publish path first, and a use saved PUBLISHED whose path is gone is read
// as UNPUBLISHING after a restart (teardown_marker.go). It saves the use
// removed after NodeUnpublishVolume when other users are left; the last
// user's teardown saves nothing until NodeUnstageVolume returned, and then
// removes the record. So after a client restart:
//
//   - a use that is PUBLISHED (its path there) is not published again
//     (Publish returns its path at once);
//   - a use that is PUBLISHING is published again: the call may or may not
//     have happened, and NodePublishVolume is idempotent;
//   - a volume with users left is never unstaged: only the teardown of its
//     last use unstages it;
//   - a teardown that was under way (a use UNPUBLISHING, a volume
//     UNSTAGING) is finished by the next Unpublish of that user, or by
//     Sweep, which calls NodeUnpublishVolume again (idempotent) before
//     unstaging.
//
// # Calls
//
// Calls about one volume are serialized (a per-volume lock that a
// context can give up on). Every call has the CSI client's per-call
// deadline; uncertain errors (csi.IsUncertain) are retried with capped,
// jittered backoff (csi.Retry) until the caller's context ends, the
// plugin's node instance looked up again before each try so that a
// plugin restarted meanwhile is reached at its new socket. Final errors
// stop at once. NotFound on unpublish and unstage is success (the CSI
// client makes it so). Errors name the volume, the user (alloc or
// operator claim) and the node.
//
// A Publish that fails leaves its use recorded: the caller tears it down
// with Unpublish, which also unstages a volume staged for it.
//
// Expand makes a node expansion (NodeExpandVolume) of a volume the node
// holds, under the volume's lock: at the first published use's target
// (else the staging path), with the staging path; the servers' online
// expansion (ClientCSI) and the volume hook's pending one call it.
package volumemanager
