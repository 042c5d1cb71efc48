// Package csi is berth's client for CSI plugins: typed clients for the
// Identity, Controller and Node services with a deadline on every call,
// errors classified by gRPC code, a retry helper driven by that class, and
// secret redaction for anything logged.
//
// # Connecting
//
// Dial connects to a plugin's unix socket (an endpoint such as
// "unix:///data/csi/plugins/a1/csi.sock"); New wraps any gRPC connection the
// caller owns. Either returns a Client whose Identity, Controller and Node
// fields make the calls of each service:
//
//	c, err := csi.Dial(endpoint, csi.WithLogger(logger))
//	...
//	defer c.Close()
//	fp, err := c.Fingerprint(ctx) // provider, version, readiness, capabilities
//	if fp.ControllerRequired() { ... ControllerPublishVolume before staging ... }
//	_, err = c.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{...})
//
// Requests and responses are the spec's own messages
// (github.com/container-storage-interface/spec/lib/go/csi); berth adds a
// typed result only where it interprets the answer: PluginInfo,
// PluginCapabilities, ControllerCapabilities, NodeCapabilities, Validation
// and Fingerprint. The concrete clients are meant to be held through small
// interfaces that the calling package declares for the calls it makes.
//
// # The call table
//
// One table (Calls; csi/calls.go) holds, for each CSI RPC the client makes,
// what berth decides about it: the deadline of each attempt, the class of
// gRPC codes on which the call is made again (RetryOn), whether the
// plugin's NotFound is a success, who in berth retries it, and why
// repeating it is safe in the CSI spec's words. The client reads it and
// nothing else: every call runs under its row's Deadline, csi.Retry repeats
// a call only on its row's codes (Call.Retryable), and the typed clients
// answer NotFound with success where the row says so. csi/CALLS.md shows
// the table; TestCallTableDoc writes it (-update) and fails when it is
// stale, and TestCallTableCoversTheServices fails for an RPC of the CSI
// services, from the generated descriptors, that the table does not have.
//
// # Deadlines
//
// Every call, Probe included, runs under its deadline from the table,
// overridable per call with WithTimeouts (DefaultTimeouts lists them); a
// sooner deadline on the caller's context wins. A hung plugin therefore
// ends the call with codes.DeadlineExceeded instead of hanging berth.
//
// # Errors
//
// Every failure is an *Error naming the call, the volume and the gRPC code.
// The code alone decides the class: Canceled, DeadlineExceeded, Unavailable,
// ResourceExhausted and Aborted are uncertain (IsUncertain) — the plugin may
// have done the work, so the call must be repeated until a definite answer;
// every other code is final (IsFinal). Error text from the plugin is never
// inspected. NotFound is success for the calls that undo something
// (DeleteVolume, DeleteSnapshot, ControllerUnpublishVolume,
// NodeUnstageVolume, NodeUnpublishVolume: the table's NotFoundIsSuccess):
// what the call was to undo is not there.
//
// A plugin whose socket is gone or refuses connections fails calls with an
// *Error wrapping ErrPluginShutdown (still uncertain: it may have acted
// before it died). A response that breaks the spec fails with
// ErrInvalidResponse, and a request missing a required field is refused
// before it is sent with ErrInvalidRequest.
//
// ValidateVolumeCapabilities distinguishes a plugin that confirms nothing
// (no or an empty `confirmed`: a Validation that is not Confirmed, with
// the plugin's message, which callers accept as a warning: plugins answer
// valid that way) from one confirming something other than was asked: a
// field berth sent dropped or changed is an ErrConfirmationMismatch
// (FailedPrecondition) naming it, with the plugin's message. A capability
// confirmed by its access mode alone is confirmed with a note
// (Validation.Notes).
//
// # Retries
//
// Retry.Do repeats an operation while its error is one the call's row
// retries on (Call.Retryable: the uncertain codes, less ResourceExhausted
// for CreateVolume and CreateSnapshot, where it means no room), with capped
// exponential backoff and jitter, and stops at any other error or when the
// context ends, logging one line per failed attempt with the call, volume
// and attempt number. Its Clock is injectable so tests do not sleep.
//
// # Secrets
//
// Fields the spec marks as secrets travel to the plugin and nowhere else.
// Requests are logged (at trace level) only through Redact, and a plugin
// message that echoes a secret has it replaced before it reaches an *Error
// or a log line. Redact is exported for API output and events.
//
// # Metrics
//
// Every call a Client makes, its own (invoke) or a server's relayed by a
// node (Invoke), is observed once: berth_csi_call_duration_seconds and
// berth_csi_call_errors_total by method and gRPC code (metrics.go; the
// agent registers Metrics()). A client whose calls reach the plugin
// through another agent (a server's, through a node) is made with
// WithoutCallMetrics, so the node's observation is the only one.
package csi
