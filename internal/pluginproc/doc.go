// Package pluginproc holds what the supervisors of go-plugin subprocesses
// share: task drivers (taskdrivers) and storage adapters (csi/adapters) are
// launched, restarted and reattached the same way. It has the TailWriter
// that keeps a plugin's last stderr lines for the error that says why it
// failed to start, the per-process socket directories (go-plugin's
// PLUGIN_UNIX_SOCKET_DIR) that a supervisor creates and removes because a
// killed plugin cannot remove its own socket, and the executable check.
//
// It is the process-level leaf under internal/pluginsup, kept apart
// because it is plain OS plumbing with tests of its own (no generics, no
// go-plugin, no gRPC codes: callers pass their sentinels in).
//
// It is internal: plugin authors use sdk/. The supervision itself (launch,
// reattach, restart, shutdown) is internal/pluginsup, built on this.
package pluginproc
