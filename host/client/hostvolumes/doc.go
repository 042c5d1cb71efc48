// Package hostvolumes makes and removes a node's dynamic host volumes:
// directories (or whatever a plugin makes) that `berth volume create` of
// type "host" asks a node for, and that group volumes of type "host" then
// name like the static host_volume blocks of the agent's config.
//
// A volume is made by a host volume plugin: the built-in "mkdir" (a
// directory <host_volumes_dir>/<volume id> with the uid, gid and mode of
// its parameters), or an executable of the client's
// host_volume_plugin_dir, run with the contract below (Nomad's dynamic
// host volume plugin specification, so plugins written for Nomad work).
//
// The plugin is run as `<plugin> <operation>`, operation one of
// fingerprint, create, delete, with the environment:
//
//	DHV_OPERATION           the operation again
//	DHV_VOLUMES_DIR         the client's host_volumes_dir
//	DHV_PLUGIN_DIR          the client's host_volume_plugin_dir
//	DHV_HOST_PATH           the path to make: <host_volumes_dir>/<volume id>
//	DHV_NODE_ID             the node's ID
//	DHV_VOLUME_NAME         the volume's name
//	DHV_VOLUME_ID           the volume's ID
//	DHV_CAPACITY_MIN_BYTES  capacity_min in bytes (0: none)
//	DHV_CAPACITY_MAX_BYTES  capacity_max in bytes (0: none)
//	DHV_PARAMETERS          the volume's parameters as a JSON object
//	DHV_CREATED_PATH        (delete) the path create answered
//
// fingerprint answers {"version": "1.0.0"} on stdout; create answers
// {"path": "/abs/path", "bytes": 1234}; delete answers nothing. A
// non-zero exit is a failure; its stderr (the last KiB) is in the error,
// which names the plugin, the volume and the node. create and delete
// must be idempotent: a client that restarts runs create again for every
// volume it made (as Nomad does), so a mount a reboot lost comes back, and
// a delete the servers did not hear answered is repeated.
//
// The Manager keeps the volumes it made in <data_dir>/client/
// host_volumes.json (written before create answers, removed after
// delete), restores them at start, and gives the node's fingerprint its
// dynamic volumes beside the static ones (pb.HostVolumeInfo with id).
package hostvolumes
