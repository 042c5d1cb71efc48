// Package storagetest is the conformance harness for berth storage
// adapters, the twin of drivertest for drivers. An adapter author runs it
// from their own go test; it launches the adapter as berth does — a real
// go-plugin subprocess with the storage handshake, the storage API
// negotiation, and the adapter's config, node and data dir in its
// environment — and speaks CSI to it over the go-plugin connection.
//
// It checks what berth relies on:
//
//   - Negotiation: the adapter's name, a storage API version this sdk
//     speaks, refusal of versions it does not (FailedPrecondition).
//   - Identity: GetPluginInfo's name (CSI's domain-name shape) and vendor
//     version, stable; Probe ready within the timeout.
//   - Capabilities coherent with what is served: CONTROLLER_SERVICE
//     advertised exactly when a controller answers; a node service with a
//     node ID; no capability of an unknown type or without the one it
//     needs; each advertised call that needs no volume answers.
//   - Errors: a request without a required field is InvalidArgument; a
//     volume the adapter does not have is NotFound, and tearing it down
//     succeeds.
//   - Lifecycles, as far as the capabilities go: CreateVolume idempotent by
//     name (AlreadyExists for an incompatible size), ValidateVolume-
//     Capabilities, ControllerPublish/Unpublish (PUBLISH_UNPUBLISH_VOLUME),
//     NodeStage/Unstage (STAGE_UNSTAGE_VOLUME), NodePublish/Unpublish into
//     temporary targets (the target gone after unpublish, data written
//     through one publish seen through the next), DeleteVolume; every step
//     twice, as berth may repeat it.
//   - Restarts: an adapter killed with SIGKILL and started again on the
//     same data dir tears down what the first one set up.
//   - Processes: started without berth's handshake the adapter exits with
//     an error; shut down by berth it exits 0 by itself.
//
// The usual setup re-executes the test binary as the adapter:
//
//	func TestMain(m *testing.M) {
//		storagetest.ServeIfAdapter(func(env sdk.StorageEnv) (sdk.StorageAdapter, error) {
//			p, err := mine.New(env)
//			return sdk.StorageAdapter{Name: "mine", Identity: p, Node: p}, err
//		})
//		os.Exit(m.Run())
//	}
//
//	func TestConformance(t *testing.T) {
//		storagetest.Run(t, storagetest.Harness{Name: "mine", NodeNeedsRoot: "it bind-mounts volumes"})
//	}
//
// Harness.Command can instead start an adapter binary built elsewhere (or
// the test binary running the adapter's main). Launch gives an adapter
// process for an author's own tests.
package storagetest
