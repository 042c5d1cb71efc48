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
// on the server; Code finds the nearest code in the chain, Status turns the
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
//     write claim).
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
// Errors of other libraries are classified by a short table of their
// sentinels (context.Canceled and DeadlineExceeded; raft.ErrNotLeader,
// ErrLeadershipLost and the other leadership and shutdown errors are
// Unavailable), matched by identity, never by message text.
//
// New refuses OK and Unknown, and a test in this package parses every Go
// file of the module and fails, naming file and line, for an exported Err…
// variable that is not declared with New (sdk/, which imports nothing of
// berth, carries its codes in its own wire table, which the test checks
// instead).
package errcode
