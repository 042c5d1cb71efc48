package errcode

import "google.golang.org/grpc/codes"

// Class is a set of gRPC codes that a caller treats alike when a call
// fails: give up because the answer is final, or try again. A code may be
// in several classes; Has tells.
//
// The classes differ where their callers need different answers from the
// same code, so each caller picks the class that says what it decides, and
// a new caller with its own needs adds a class here rather than a list of
// its own.
type Class uint8

const (
	// Refusal is the cluster's answer to a request, the same from every
	// server: the request itself was refused. A client that fails over
	// between servers stops at a refusal and drops alloc updates the
	// servers refused; any other code (no answer in time, a server that
	// cannot serve now, or one that failed without explaining: Internal,
	// Unknown) says something about that server, so it tries the next.
	Refusal Class = 1 << iota

	// ClaimRefusal is the servers' final answer to a volume hook's claim
	// call (ClientClaim): the hook fails instead of waiting on. It is
	// Refusal without AlreadyExists and OutOfRange, which the claim calls
	// do not answer; the hook has always retried them, and folding the two
	// classes into one would change that.
	ClaimRefusal

	// ReportRefusal is a final refusal of a volume hook's report on a
	// claim (ClientClaimUpdate): the claim is gone, on another node, or the
	// report is one the servers cannot take, so the hook drops the report.
	// Unlike Refusal it leaves out Unauthenticated (credentials can be
	// fixed, and the report must arrive) and FailedPrecondition, which the
	// hook decides per report: it is final for some target states and not
	// for node-detached.
	ReportRefusal

	// Uncertain leaves the outcome of a call unknown: it may have taken
	// effect, so it must be retried until a definite answer. CSI calls are
	// retried on it (csi.IsUncertain).
	Uncertain

	// Unreachable is a call that reached no one: the peer could not be
	// reached (Unavailable) or did not answer in time. Worth another
	// attempt on the same route; narrower than Uncertain, which also takes
	// a peer's own answers (ResourceExhausted, Aborted, Canceled).
	Unreachable

	// CreateUncertain is Uncertain less ResourceExhausted, for the CSI
	// calls that make something new (CreateVolume, CreateSnapshot): from
	// them ResourceExhausted is the plugin's final answer that it has no
	// room or cannot place the volume where asked (CSI spec, the calls'
	// error tables), not a rate limit to wait out. The csi call table
	// (csi.Calls) retries them on it.
	CreateUncertain
)

// classes is the one table from gRPC code to the classes it is in,
// indexed by code, beside names (http.go), the table from code to the
// API's name and HTTP status. A code gRPC does not define is in no class.
var classes = [...]Class{
	codes.OK:                 0,
	codes.Canceled:           Uncertain | CreateUncertain,
	codes.Unknown:            0,
	codes.InvalidArgument:    Refusal | ClaimRefusal | ReportRefusal,
	codes.DeadlineExceeded:   Uncertain | Unreachable | CreateUncertain,
	codes.NotFound:           Refusal | ClaimRefusal | ReportRefusal,
	codes.AlreadyExists:      Refusal | ReportRefusal,
	codes.PermissionDenied:   Refusal | ClaimRefusal | ReportRefusal,
	codes.ResourceExhausted:  Uncertain,
	codes.FailedPrecondition: Refusal | ClaimRefusal,
	codes.Aborted:            Uncertain | CreateUncertain,
	codes.OutOfRange:         Refusal,
	codes.Unimplemented:      0,
	codes.Internal:           0,
	codes.Unavailable:        Uncertain | Unreachable | CreateUncertain,
	codes.DataLoss:           0,
	codes.Unauthenticated:    Refusal | ClaimRefusal,
}

// Has reports whether code is in class c.
func (c Class) Has(code codes.Code) bool {
	return int(code) < len(classes) && classes[code]&c != 0
}
