// Package taskdrivers is the client side of berth's task drivers: the
// catalog of a node's drivers, and the Manager that runs their plugin
// processes, folds their fingerprints into the node's, restarts them when
// they die and recovers their tasks.
//
// # Catalog
//
// Catalog lists the drivers built into berth (handed in by the agent as
// CatalogConfig.Builtins, builtin/drivers.Plugins; mock only in dev mode
// or when a plugin block names it), every executable in the agent's plugin_dir (named for the driver it
// serves; it replaces a built-in driver of the same name), and an entry
// for every plugin block that names neither, which the manager reports as
// missing. Built-in drivers run as go-plugin subprocesses like third-party
// ones: CatalogConfig.Executable (the berth binary, or a test binary that
// calls drivers.MainIfRequested) is started with the built-in's Args,
// `builtin driver NAME`. The catalog is pluginsup.Catalog, the one shared
// with the storage adapters; this package imports nothing of builtin/.
//
// # Manager
//
//	m, err := taskdrivers.New(taskdrivers.Config{Plugins: plugins, Store: db,
//		Options: pluginsup.Options{Logger: logger}})
//	err = m.Start(ctx)          // launches every plugin; config errors are returned
//	infos := m.DriverInfos()    // for node registration; m.Changed() signals updates
//	d, err := m.Driver("raw_exec")
//	h, err := d.StartTask(ctx, cfg) // handle persisted in the Store
//	res, err := d.WaitTask(ctx, cfg.GetId())
//	err = m.Shutdown(ctx)
//
// For each plugin the manager checks the executable, launches it (go-plugin
// handshake, then API version negotiation), checks that it calls itself by
// its catalog name, validates the plugin config from the agent config
// against the plugin's schema (errors name the driver, the key and the
// plugin block's file:line), sets it, and recovers every task whose handle
// is in the Store. It then follows the plugin's fingerprint stream into the
// driver's pb.DriverInfo (health, description, version, attributes,
// built-in or plugin_dir path) and signals Changed so that the client
// re-registers the node.
//
// A task with mounts starts only on a driver that honours them
// (sdk.MountsSupported: mount_volumes at driver API version 2 or later);
// any other driver refuses it with ErrMountsNotSupported, naming driver
// and task, rather than run it without its mounts.
//
// A plugin that is missing, not executable, crashes at start (its last
// stderr lines are quoted), speaks another protocol version or dies later
// is reported as the driver's health and log error, and retried with
// capped exponential backoff (Config.Backoff); the other drivers and the agent carry on. An
// invalid plugin config is not retried: Start returns it. This supervision
// (launch or reattach, restart, shutdown), the catalog, the config
// defaults (pluginsup.Options) and the sentinel errors (named "driver" in
// a *PluginError) are internal/pluginsup, shared with the storage
// adapters of csi/adapters; this package adds the driver's setup, its
// fingerprint and its tasks.
//
// # What survives what
//
// Tasks outlive their plugin: raw_exec runs each under its own executor,
// in a session of its own. When a plugin dies, calls of a Driver that are
// safe to repeat wait for the restarted plugin, which has recovered the
// tasks from their handles, so WaitTask still returns the task's real exit.
//
// The manager persists each plugin's go-plugin reattach config in the
// Store. Shutdown stops the plugins (tasks keep running, handles stay
// persisted) and deletes those records; a client that crashed leaves them,
// and the next manager reattaches to a plugin still running from them, or
// starts a new one, and recovers the tasks either way: the same processes,
// not restarted ones. Config.StopTasksOnShutdown makes Shutdown stop and
// destroy the tasks first, for a dev agent whose data dir is deleted at exit.
//
// The Store is an interface declared here and implemented by the client
// state DB (host/client/state), which this package does not import.
package taskdrivers
