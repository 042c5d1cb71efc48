// Package sdk is what a task driver plugin for berth imports, and what
// berth itself uses to talk to one: the protocol (package driverpb, from
// proto/berth/driver/v1/driver.proto), the Driver interface, ServeDriver
// for the plugin side and LaunchDriver / DispenseDriver for the client
// side. It imports nothing of berth outside sdk/, so a third-party driver
// links this package, go-plugin and gRPC, never berth's server.
//
// # Writing a driver
//
// Implement Driver (optionally ExecDriver and StatsDriver) and serve it:
//
//	func main() {
//		logger := sdk.NewPluginLogger("sleep")
//		if err := sdk.ServeDriver(sleep.New(logger)); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//	}
//
// Declare the plugin config and the task config as a driverpb.Schema of
// typed fields and read them through ConfigSpec.Validate, which returns
// *Values with defaults applied and errors that name the plugin and key.
// EventHub, FingerprintHub and TaskStore do the bookkeeping most drivers
// need. Return the sentinels of errors.go (wrapped with %w) for the
// conditions they name: they cross the process boundary as gRPC codes and
// reasons and come out as the same sentinels on the client, and berth's API
// answers them with those codes (an error that wraps none is Unknown, HTTP
// 500 — say what is wrong with a sentinel when one fits). Drivers that
// run processes use sdk/executor so tasks survive plugin restarts; test a
// driver with sdk/drivertest and a storage adapter with sdk/storagetest,
// which run it as a real subprocess plugin and check what berth relies on.
//
// # Using a driver (the client side)
//
//	p, err := sdk.LaunchDriver(ctx, sdk.LaunchConfig{Name: "raw_exec", Cmd: cmd, Logger: logger})
//	d := p.Driver() // *DriverClient, an sdk.Driver over gRPC
//	schemas, err := d.ConfigSchema(ctx)
//	vals, err := sdk.ConfigSpec{Plugin: d.Name(), Scope: sdk.ScopeTaskConfig, Schema: schemas.GetTask()}.Validate(raw)
//	handle, err := d.StartTask(ctx, cfg) // persist handle
//	res, err := d.WaitTask(ctx, cfg.GetId())
//
// LaunchDriver starts the plugin, performs the go-plugin handshake
// (Handshake: magic cookie and protocol version) and then negotiates the
// API version (APIVersion, MinAPIVersion; history in version.go). Every
// DriverClient call takes a context. When the plugin process dies, calls
// fail with an *RPCError wrapping ErrPluginShutdown, decided by go-plugin's
// view of the process (a broken connection, Unavailable, waits briefly for
// the exit to be seen), never by message text; an Unavailable from a plugin
// that is still running is an ordinary error. A task that could not be
// started is ErrTaskStartFailed with a *StartError (reason and path). The
// caller then launches a new plugin and calls RecoverTask with each
// persisted handle; DriverPlugin.Reattach gives what to persist to
// reconnect to a still-running plugin after berth itself restarts.
//
// Mounts (TaskConfig.mounts) reach only a driver that honours them:
// MountsSupported(d.APIVersion(), caps) says whether it does; the server
// side validates them (ValidateTaskConfig) and refuses them for a driver
// without the mount_volumes capability, so a caller must check before
// starting a task with mounts rather than expect them dropped.
//
// Streams (Fingerprint, TaskEvents, TaskStats) are iterators: range over
// them; the loop ends when ctx ends or with an error as the last element.
package sdk
