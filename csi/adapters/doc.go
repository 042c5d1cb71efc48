// Package adapters is the client side of storage adapters: CSI plugins
// in berth's static catalog, run by the agent as go-plugin subprocesses
// (sdk.ServeStorageAdapter on the plugin side) rather than as tasks. It is
// the sibling of taskdrivers: both supervise their plugins with
// internal/pluginsup (launch, reattach, restart with backoff, shutdown; the
// catalog, the config defaults and the sentinel errors, named "storage
// adapter" in an *AdapterError) and sdk's go-plugin start; this package adds CSI Probe as the
// health check, the Handle's connection and the events. It imports nothing
// of builtin/.
//
// # Catalog
//
// Catalog lists the adapters built into berth (handed in by the agent as
// CatalogConfig.Builtins, builtin/csi/adapters.Plugins: hostpath, offered
// in dev mode or when a plugin block names it), every
// executable in <plugin_dir>/csi/ (named for the adapter it serves; it
// replaces a built-in one of the same name), and a missing entry for each
// `plugin "NAME" { type = "csi" }` block that names neither. A built-in
// adapter's config is checked here by its Builtin.CheckConfig
// (ErrInvalidConfig, naming the block's file:line); a third-party adapter's config is handed to it as is.
//
// # Manager
//
//	m, err := adapters.New(adapters.Config{Adapters: cat, Store: db, DataDir: dir, NodeID: id})
//	err = m.Start(ctx)              // launches (or reattaches) every adapter
//	h, err := m.Adapter("hostpath")
//	client := csi.New(h.Conn())     // follows restarts of the adapter
//	events, cancel := m.Subscribe() // started, reattached, healthy, unhealthy, exited, start-failed
//	st := h.State()                 // running, healthy, reason, pid, restarts
//	err = m.Shutdown(ctx)
//
// Each adapter process gets its config, the node's ID and name and a data
// dir of its own (<data_dir>/csi/adapters/<name>) in its environment
// (sdk.StorageAdapterEnv). After the go-plugin handshake (sdk.
// StorageHandshake) and the storage API negotiation the manager checks
// that the adapter calls itself by its catalog name, then probes it
// (CSI Probe, each with a deadline) at a fast cadence until it is ready
// and every HealthInterval after; each change of health is an Event.
//
// An adapter that exits, or is found gone by a call, is restarted with
// capped exponential backoff; calls through its Handle's Conn wait (until
// their deadline) for the new process. An adapter that is missing, not
// executable or crashes at start is retried the same way; one with an
// invalid config is not (Start returns the error, calls fail
// FailedPrecondition).
//
// # What survives what
//
// The manager persists each adapter's go-plugin reattach config in the
// Store (the client state DB's storage_adapters bucket). Shutdown stops the
// processes and deletes the records; a client that crashes leaves both,
// and the next manager reattaches to a process still running from them
// (EventReattached) instead of starting another - unless it was started
// with another executable, arguments, config or (built-in) berth version,
// in which case it is stopped and replaced.
//
// The plugin manager (csi/pluginmanager, which fingerprints plugins for the
// servers) consumes Names, Adapter, State and Subscribe through its own
// AdapterSource interface, which the agent adapts this Manager to; from it
// on, an adapter and a task-launched plugin look the same.
package adapters
