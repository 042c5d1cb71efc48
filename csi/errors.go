package csi

import (
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
)

// ErrPluginShutdown is returned, wrapped in an *Error, by any call when the
// plugin's socket is gone or refuses connections: the plugin process has
// exited. It is uncertain, because the plugin may have acted on the call
// before it died.
var ErrPluginShutdown = errcode.New(codes.Unavailable, "csi plugin shut down")

// ErrInvalidResponse is returned, wrapped in an *Error, when a plugin answers
// OK with a response that breaks the CSI spec (a required field missing).
// The Error's code is codes.Internal, which is final: retrying will not
// change the plugin's answer. (A ValidateVolumeCapabilities confirmation
// that differs from the request is ErrConfirmationMismatch.)
var ErrInvalidResponse = errcode.New(codes.Internal, "invalid response from csi plugin")

// ErrInvalidRequest is returned, wrapped in an *Error, before anything is sent
// when a request lacks a field the CSI spec requires. Its code is
// codes.InvalidArgument.
var ErrInvalidRequest = errcode.New(codes.InvalidArgument, "invalid csi request")

// ErrInvalidEndpoint is returned by Dial when the endpoint is not a unix
// socket path berth can connect to.
var ErrInvalidEndpoint = errcode.New(codes.InvalidArgument, "invalid csi endpoint")

// Error is the error returned by every call of the client. It names the call
// and the volume and carries the gRPC code the class is decided by.
type Error struct {
	// Call is the CSI RPC that failed.
	Call Call
	// VolumeID is the volume the call was about (the requested name for
	// CreateVolume), empty for calls about no volume.
	VolumeID string
	// Code is the gRPC status code of the failure.
	Code codes.Code
	// Message is the plugin's status message with every secret of the
	// request removed.
	Message string
	// Err is ErrPluginShutdown, ErrInvalidResponse, ErrInvalidRequest or
	// ErrControllerInstanceChanged (wrapped with detail) when one of those
	// applies, nil otherwise.
	Err error
}

func (e *Error) Error() string {
	s := "csi " + string(e.Call)
	if e.VolumeID != "" {
		s += " volume " + strconv.Quote(e.VolumeID)
	}
	if e.Err != nil {
		return s + ": " + e.Err.Error()
	}
	return s + ": " + e.Code.String() + ": " + e.Message
}

// Unwrap returns the sentinel-bearing cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Uncertain reports whether the operation may have taken effect although
// the call failed, so that it must be retried until a definite answer.
func (e *Error) Uncertain() bool { return UncertainCode(e.Code) }

// GRPCStatus lets the code travel on when this error is returned from one of
// berth's own gRPC services (status.Code and status.FromError find it).
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Error()) }

// UncertainCode reports whether a gRPC code leaves the outcome of a call
// unknown (errcode.Uncertain): Canceled, DeadlineExceeded, Unavailable,
// ResourceExhausted and Aborted. Every other code is final.
func UncertainCode(c codes.Code) bool { return errcode.Uncertain.Has(c) }

// IsUncertain reports whether err leaves the outcome of the call unknown, so
// that the call must be retried. It looks for an *Error first; for other
// errors it uses the gRPC code and treats context errors and
// ErrPluginShutdown as uncertain. A nil error is not uncertain. Whether a
// given call is retried on err is Call.Retryable, which reads the call
// table.
func IsUncertain(err error) bool { return err != nil && UncertainCode(errCode(err)) }

// IsFinal reports whether err is a definite failure: retrying the call will
// not change the answer. A nil error is not final.
func IsFinal(err error) bool { return err != nil && !IsUncertain(err) }

// IsNotFound reports whether err is a plugin's NotFound answer.
func IsNotFound(err error) bool { return err != nil && status.Code(err) == codes.NotFound }
