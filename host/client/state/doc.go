// Package state is the client's state DB: a bbolt file at
// <data_dir>/client/state.db holding what a client must find again after
// it restarts. Values are protobuf messages (rpc/proto/berth/v1/
// client_state.proto), so a newer client reads what an older one wrote.
//
// Layout: one top-level bucket per kind of record, keyed by the record's
// natural ID, plus a meta bucket with the schema version.
//
//	meta           "schema_version" -> uint32, big endian
//	driver_plugins <driver name>    -> DriverPluginRecord (go-plugin reattach config)
//	task_handles   <task id>        -> TaskHandleRecord   (a driver's task handle)
//	allocs         <alloc id>       -> AllocRecord        (an alloc the client runs, with its job)
//	task_states    <alloc id>/<task> -> TaskStateRecord   (a task's state and current task id)
//	csi_plugins    <type>/<alloc id>/<plugin id> -> CSIPluginRegistration (the dynamic CSI plugin registry, csi/registry)
//	storage_adapters <adapter name> -> StorageAdapterRecord (go-plugin reattach config of a CSI storage adapter)
//
// A bucket planned for later work keeps the same shape: "volume_usage"
// (volume and alloc -> staged and published paths). Adding a bucket is not a schema change;
// changing the encoding of an existing one is, and bumps SchemaVersion with
// a migration in Open.
//
// Open takes an exclusive lock on the file, so a second agent on the same
// data dir fails at once with ErrLocked instead of corrupting it. Every
// method is safe for concurrent use; each write is one bbolt transaction,
// fsynced before it returns.
//
// A record that no longer decodes does not hide the others: list methods
// return every good record together with a *RecordError per bad one.
package state
