// Package errcode gives every refusal berth can answer with a gRPC code, in
// one place, and from that code an HTTP status and a JSON error code.
//
// A package declares its sentinels with New, giving the code a caller should
// branch on:
//
//	// ErrNodeNotFound is returned by Apply when a command names a node that
//	// is not registered.
//	var ErrNodeNotFound = errcode.New(codes.NotFound, "node not found")
//
// and wraps them with %w and the name of the object concerned
// (fmt.Errorf("node %s: %w", id, ErrNodeNotFound)). errors.Is keeps working
// on the server; Code finds the nearest code in the chain (the rule is
// below), Status turns the
// error into the gRPC status the server answers with (the message is the
// whole wrapped text, so it still names the node), and HTTPStatus and Name
// give the HTTP API's status and "code" field. A sentinel also implements
// GRPCStatus, so a wrapped sentinel keeps its code wherever grpc-go converts
// an error, not only behind berth's error interceptor.
//
// Which code:
//
//   - NotFound, AlreadyExists: the named object is missing, or exists already.
//   - InvalidArgument: the request itself is wrong; retrying it as is will
//     fail again whatever the cluster's state.
//   - FailedPrecondition: the request is fine, the cluster's (or the host's)
//     state refuses it; an operator or a later state may change the answer.
//   - ResourceExhausted: a counted resource is used up (a volume's one
//     write claim). HTTP 409, like FailedPrecondition, not google.rpc's
//     429: 429 makes HTTP clients and proxies back off and retry on their
//     own, and a claimed volume stays claimed until its holder lets go.
//   - Unavailable: try again, here or on another server; nothing was done,
//     or the outcome is unknown and the operation is safe to retry.
//   - Unimplemented: this version does not know the operation (a raft
//     command from a newer server).
//   - DataLoss: stored data is corrupt.
//   - Internal: an invariant is broken, a bug — berth's own, or a plugin's
//     that answered against its protocol. Internal is never what an
//     unclassified error gets: an error with no code in its chain is
//     Unknown, so "nobody classified it" and "we have a bug" stay apart.
//
// What a caller does with a failed call's code is read from one table too
// (classes.go): a Class is a set of codes callers treat alike, and
// Class.Has asks it. Refusal is the cluster's final answer (a client stops
// failing over), Uncertain a call that may have taken effect and must be
// retried (CSI), Unreachable a call that reached no one; ClaimRefusal and
// ReportRefusal are the volume hook's narrower finals. A caller with a new
// need adds a class beside them instead of a switch of its own.
//
// Which code wins when an error carries several: the nearest. Code takes
// the first coded error met walking the chain as errors.As does: from the
// outermost wrapper inwards, and for an error wrapping several (fmt.Errorf
// with several %w, errors.Join) the first operand's whole chain before the
// next. An error whose own code is Unknown (an sdk.RPCError for a driver's
// unclassified error) does not count. So whoever wraps last decides, and
// the call site orders its wraps by what it means:
//
//   - A wrapper that reclassifies puts its sentinel first:
//     fmt.Errorf("%w: %w", taskdrivers.ErrDriverFailed, configErr) is
//     FailedPrecondition, though the config error is InvalidArgument,
//     because the caller's request is fine and the node's config is not.
//   - A wrapper whose sentinel names only the step that failed, not whether
//     retrying helps ("plugin failed to start", Unavailable), must
//     not hide the cause's code (an incompatible plugin API is
//     FailedPrecondition): it joins them with Fallback(sentinel, cause),
//     which reads "sentinel: cause", errors.Is both, and has the cause's
//     code when it has one and the sentinel's otherwise.
//
// The rule is not "the deepest code wins": that would make reclassifying
// impossible, and with several operands "deepest" is not even defined. The
// sdk's plugin wire (sdk/status.go) follows the same rule when an error
// wraps several of its sentinels.
//
// Errors of other libraries are classified by a short table of their
// sentinels, matched by identity, never by message text: the context
// errors (context.Canceled and DeadlineExceeded) are in it here, and the
// package that wraps another library registers that library's sentinels
// from its init with RegisterForeign (the server core registers raft's:
// raft.ErrNotLeader, ErrLeadershipLost and the other leadership and
// shutdown errors are Unavailable), so this package imports none of them.
//
// New refuses OK and Unknown, and a test in this package parses every Go
// file of the module and fails, naming file and line, for an exported Err…
// variable that is not declared with New. sdk/ imports nothing of berth, so
// its sentinels are declared with sdk's own sdkerr.New(codes.X, "REASON",
// "..."), which the test requires there instead: they have a GRPCCode
// method, which Code matches by shape like any coded error's, so a driver's
// refusal keeps its code from the plugin, through taskdrivers, to the API;
// sdk.RPCError answers its call's code the same way.
package errcode
