// Package drivertest is the conformance harness for berth task drivers.
// A driver author runs it from their own go test; it serves the driver as a
// real go-plugin subprocess, exactly as berth does, and checks the
// semantics berth relies on: start and wait with exit codes, stop with a
// signal and a timeout then kill, idempotent stop and destroy, destroy of a
// running task, unknown task IDs, duplicate IDs, bad task and plugin
// configs, mounts (for drivers that honour them: a task gets exactly its
// mounts, invalid ones are refused), context cancellation, signals, and
// recovery of tasks from their
// handles both in the same plugin and in a new plugin after the old one was
// killed with SIGKILL.
//
// The usual setup re-executes the test binary as the plugin:
//
//	func TestMain(m *testing.M) {
//		drivertest.ServeIfPlugin(func(l hclog.Logger) sdk.Driver { return sleep.New(l) })
//		os.Exit(m.Run())
//	}
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, drivertest.Harness{Cases: drivertest.Cases{
//			ExitCode:        func(code int) sdk.ConfigMap { ... },
//			RunUntilStopped: func() sdk.ConfigMap { ... },
//		}})
//	}
//
// Harness.Command can instead start a plugin binary built elsewhere.
// Launch and InProcess give a driver client for an author's own tests:
// over a real subprocess, or over in-process gRPC.
package drivertest
